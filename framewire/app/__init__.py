"""The composition root and the command line: where a config becomes a job (`framewire.app.compose`) and where
each command beyond `run` lives (`framewire.app.commands`). The only package that knows every other one."""
