"""An example framewire plug-in: the `brightness` task, the `csv` output and the `pattern` source."""
