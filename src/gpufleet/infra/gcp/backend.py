"""``backend`` for ``provider: gcp``: the GCP side of the Pulumi driver (``gpufleet.infra.pulumi_stack``).

Its program is ``GpuClusterGcp``; the stack's default provider gets the project, region and zone;
credentials are Application Default Credentials (or a token in the environment); nodes have no external
IP, so SSH goes through an IAP TCP tunnel, which names the instance: the inventory's address of a host is
its instance name. The leftover finder is ``gpufleet.infra.gcp.leftovers`` (Cloud Asset Inventory).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.catalog.gcp import REPLACING_FIELDS
from gpufleet.errors import EnvironmentProblem
from gpufleet.infra.gcp.images import GcpImages
from gpufleet.infra.images import CloudImage
from gpufleet.infra.leftovers import ExpiredCluster, Leftover
from gpufleet.infra.plan import MockCloud
from gpufleet.infra.pulumi_stack import PulumiBackend, known_hosts_args
from gpufleet.infra.tags import PLAN_CLUSTER_ID
from gpufleet.infra.userdata import IMAGE_USER
from gpufleet.inventory.model import Connection
from gpufleet.spec.model import ClusterSpec, GcpProvider
from gpufleet.state import ClusterState

if TYPE_CHECKING:
    from gpufleet.infra.backend import Backend

CREDENTIAL_VARIABLES = (
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CREDENTIALS",
    "GOOGLE_OAUTH_ACCESS_TOKEN",
    "CLOUDSDK_AUTH_ACCESS_TOKEN",
)


def _provider(spec: ClusterSpec) -> GcpProvider:
    assert isinstance(spec.provider, GcpProvider)
    return spec.provider


def credentials_present() -> bool:
    if any(os.environ.get(variable) for variable in CREDENTIAL_VARIABLES):
        return True
    config = Path(os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud")
    return (config / "application_default_credentials.json").is_file()


class GcpBackend(PulumiBackend):
    kind = "gcp"
    replacing_fields = REPLACING_FIELDS

    def program(
        self,
        spec: ClusterSpec,
        created_at: datetime,
        ssh_keys: Sequence[str],
        baked: CloudImage | None = None,
        cluster_id: str = PLAN_CLUSTER_ID,
    ) -> dict[str, Any]:
        from gpufleet.infra.gcp.component import GpuClusterGcp, GpuClusterGcpArgs

        args = GpuClusterGcpArgs(
            spec=spec,
            created_at=created_at,
            ssh_keys=tuple(ssh_keys),
            baked=baked,
            cluster_id=cluster_id,
            boot_configure=baked is not None and self.boot_configure,
        )
        return GpuClusterGcp(spec.name, args).stack_outputs

    def replace_before_up(self, deployment: Mapping[str, Any]) -> dict[str, str]:
        """VMs that are gone or stopped by a Spot preemption (``lost.lost_vms``): the next up makes them
        again, as the check says it does."""
        from gpufleet.infra.gcp.leftovers import session_get
        from gpufleet.infra.gcp.lost import lost_vms

        return lost_vms(deployment, session_get())

    # Its baked images (``gpufleet.bake`` drives them): the base and builder of a bake, and the look-ups.
    images = GcpImages()

    def mock_cloud(self, spec: ClusterSpec) -> MockCloud:
        from gpufleet.infra.gcp.mocks import GcpMockCloud

        return GcpMockCloud(spec)

    def provider_config(self, spec: ClusterSpec) -> dict[str, str]:
        provider = _provider(spec)
        return {"gcp:project": provider.project, "gcp:region": provider.region, "gcp:zone": provider.zone}

    def check_credentials(self, spec: ClusterSpec) -> None:
        if not credentials_present():
            raise EnvironmentProblem(
                "no Google Cloud credentials found (GOOGLE_APPLICATION_CREDENTIALS, application default "
                "credentials)",
                hint="run 'gcloud auth application-default login', or set GOOGLE_APPLICATION_CREDENTIALS to "
                "a service account key; in CI use workload identity federation",
            )

    def connection(self, spec: ClusterSpec, state: ClusterState) -> Connection:
        """The cluster key through an IAP TCP tunnel ('gcloud compute start-iap-tunnel' takes the
        instance name, the address ``host_address`` gives every host)."""
        provider = _provider(spec)
        key = str(state.private_key) if state.private_key.exists() else None
        tunnel = (
            f"gcloud compute start-iap-tunnel %h %p --listen-on-stdin --project={provider.project} "
            f"--zone={provider.zone} --verbosity=warning"
        )
        return Connection(
            user=IMAGE_USER,
            become=True,
            private_key_file=key,
            ssh_common_args=f'{known_hosts_args(state)} -o ProxyCommand="{tunnel}"',
        )

    def host_address(self, host: dict[str, Any]) -> str:
        return str(host["name"])

    expiry_scope = "project"

    def find_expired(self, scope: str) -> list[ExpiredCluster]:
        from gpufleet.infra.gcp import leftovers

        return leftovers.find_expired(scope)

    def find_leftovers(self, spec: ClusterSpec, cluster_id: str | None = None) -> list[Leftover]:
        from gpufleet.infra.gcp import leftovers

        return leftovers.find_leftovers(spec.name, _provider(spec).project, cluster_id=cluster_id)


# The table's row: the type checker holds it to the ``Backend`` protocol.
backend: Backend = GcpBackend()
