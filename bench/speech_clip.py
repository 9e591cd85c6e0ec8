"""The shipped speech clip, `assets/audio/speech.flac`: six sentences spoken by espeak-ng with
silences of known lengths between them, 16 kHz mono, for the VAD check and the lip-sync demo.

`python -m bench.speech_clip [--out assets/audio/speech.flac]` makes it again (espeak-ng from
Debian's packages; the file shipped was made with espeak-ng 1.51). Each sentence is trimmed of
espeak's own leading and trailing silence; where each one lies is printed.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

import numpy as np

RATE = 16000
SENTENCES = (
    ("en-us", 150, "Hello, this is a test of voice activity detection."),
    ("en-us", 160, "The frames should follow the audio, without drift."),
    ("en-us", 140, "One, two, three."),
    ("en-gb", 150, "Silence comes between the sentences, and the detector should hear it."),
    ("en-us", 170, "Short."),
    ("en-us", 150, "This is the last sentence of the clip."),
)
GAPS_S = (0.8, 1.2, 0.6, 2.0, 0.9, 1.5, 1.0)
"""Silence before the first sentence, between sentences, and after the last."""


def speech() -> tuple[np.ndarray, list[tuple[float, float]]]:
    """The clip's samples (float32, 16 kHz) and where each sentence lies (seconds)."""
    from framewire.components import AudioDecoder

    out = [np.zeros(int(GAPS_S[0] * RATE), np.float32)]
    spans, at = [], GAPS_S[0]
    with tempfile.TemporaryDirectory() as folder:
        for i, (voice, speed, text) in enumerate(SENTENCES):
            wav = str(Path(folder) / f"s{i}.wav")
            subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-w", wav, text], check=True)
            decoder = AudioDecoder("speech", wav, RATE)
            decoder.open()
            x = np.concatenate([c.samples for c in decoder.chunks()])
            decoder.close()
            loud = np.nonzero(np.abs(x) > 1e-3)[0]
            x = x[loud[0] : loud[-1] + 1]
            spans.append((round(at, 3), round(at + x.size / RATE, 3)))
            out += [x, np.zeros(int(GAPS_S[i + 1] * RATE), np.float32)]
            at += x.size / RATE + GAPS_S[i + 1]
    return np.concatenate(out), spans


def write_flac(path: Path, samples: np.ndarray) -> None:
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("flac", rate=RATE, layout="mono")
        pcm = (np.clip(samples, -1, 1) * 32767).astype(np.int16)[None]
        frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
        frame.sample_rate, frame.pts = RATE, 0
        container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="assets/audio/speech.flac")
    args = parser.parse_args()
    samples, spans = speech()
    write_flac(Path(args.out), samples)
    print(f"{args.out}: {samples.size / RATE:.3f} s; sentences at {spans}")


if __name__ == "__main__":
    main()
