"""The `attndeploy` command line (Typer): one module per command, errors handled in app.main."""
