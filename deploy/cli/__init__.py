"""The `advisor` command line: one module per command group, composed by `deploy.wiring.build_cli`."""
