"""The composition root and the command line: where a config becomes a job (`app.plan`) and where
each command beyond `run` lives (`app.commands`). The only package that knows every other one."""
