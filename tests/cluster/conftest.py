"""One baked node image for the whole session: every local-cluster test then boots nodes that already
hold the roles' install phase, and configures only per-cluster work. The image stays in podman's store
afterwards (a cache keyed by the roles' content hash), so a later session with the same roles reuses it."""

from __future__ import annotations

import pytest
from cluster_cli import ROOT, Cli, require_local_backend


@pytest.fixture(scope="session")
def baked_image(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """``gpufleet image build examples/local.yaml``: built on the first session, found on later ones. Used
    by the modules whose clusters boot it (``pytestmark``), not by the GPU modules, which build their own
    nodes: under xdist their worker need not wait for the bake."""
    require_local_backend()
    workdir = tmp_path_factory.mktemp("bake")
    # A bake that builds Slurm (roles/slurm, when the cache lacks its build key) took 26 min on this 2-core
    # machine under the load of other sessions (docs/benchmarks.md): an hour, the role's build lock's wait.
    image = Cli(workdir, workdir / "state").json(
        "image", "build", str(ROOT / "examples" / "local.yaml"), timeout=3600
    )
    assert image["name"].startswith("localhost/gpufleet-baked:") and len(image["hash"]) == 64
    return image
