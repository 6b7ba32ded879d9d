"""The ``gpufleet`` command line (Typer + rich)."""
