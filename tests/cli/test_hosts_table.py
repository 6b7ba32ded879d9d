"""The table ``up`` prints: on an 80-column terminal (a pipe, CI's log) every host name and address shows
whole, folded inside its cell if it must, never cut with an ellipsis (the demo printed "demo-control…")."""

from __future__ import annotations

import io

from rich.console import Console

from gpufleet.cli.cluster import hosts_table
from gpufleet.inventory.model import Host
from gpufleet.spec.model import Role

NAMES = ("demo-controller", "a3mega-training-run-0427-compute-12", "a3mega-training-run-0427-compute-13")


def rendered(width: int) -> str:
    hosts = [
        Host(
            name=name,
            roles=[Role.CONTROLLER, Role.LOGIN] if i == 0 else [Role.COMPUTE],
            address=f"10.128.{i}.{200 + i}",
            private_ip=f"10.128.{i}.{200 + i}",
            instance_type="a3-megagpu-8g",
            gpus=8,
            cpus=208,
            memory_mb=1_872_000,
        )
        for i, name in enumerate(NAMES)
    ]
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    console.print(hosts_table("cluster a3mega (gcp) is up", hosts))
    return console.export_text()


def first_column(text: str) -> str:
    """The host column's cells, read down the table with the folds joined."""
    return "".join(line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│"))


def test_every_host_name_shows_whole_at_80_columns() -> None:
    text = rendered(80)
    assert "…" not in text, text
    # Whole, not cropped: every line within 80 columns and closed by the table's right border.
    assert all(len(line) <= 80 and line.rstrip()[-1] in "┓┃┩│┘" for line in text.splitlines()[1:]), text
    assert first_column(text) == "".join(NAMES), text
    assert "controller" in text and "login" in text and "10.128.2.202" in text, text
