"""Inference backends behind one `Engine` interface. No pre- or post-processing lives here."""
