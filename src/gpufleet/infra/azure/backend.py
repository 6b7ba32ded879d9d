"""``backend`` for ``provider: azure``: the Azure side of the Pulumi driver (``gpufleet.infra.pulumi_stack``).

Its program is ``GpuClusterAzure``; the stack's default provider gets the subscription and location;
credentials are what azure-native and azure-identity find (``az login``, a service principal or workload
identity in ``ARM_*``/``AZURE_*`` variables); nodes have no public IP, so SSH goes through Azure Bastion:
a proxy script opens ``az network bastion tunnel`` to the node's private IP on a free local port and
relays SSH's stdin and stdout to it. The leftover finder is ``gpufleet.infra.azure.leftovers`` (the
resource group, then Azure Resource Graph).

Baked images: gpufleet has no Azure image builder yet (the backend table's ``bakes_in_cloud`` is false, so
there is no baker, as on bare metal): ``up`` boots Microsoft's HPC image (or ``provider.image``) and
``configure`` verifies what it ships and installs the rest. ``images`` says so to anything that asks.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.errors import EnvironmentProblem, SpecError
from gpufleet.infra.images import CloudImage
from gpufleet.infra.leftovers import ExpiredCluster, Leftover
from gpufleet.infra.plan import MockCloud
from gpufleet.infra.pulumi_stack import PulumiBackend, known_hosts_args
from gpufleet.infra.tags import PLAN_CLUSTER_ID
from gpufleet.infra.userdata import IMAGE_USER
from gpufleet.inventory.model import Connection
from gpufleet.spec.model import AzureProvider, ClusterSpec
from gpufleet.state import ClusterState

if TYPE_CHECKING:
    from gpufleet.infra.backend import Backend
    from gpufleet.infra.images import BakeSource

# Service principal / workload identity variables azure-native reads (ARM_*) and azure-identity reads
# (AZURE_*); without any, the Azure CLI's login (~/.azure) is used by both.
CREDENTIAL_VARIABLES = (
    "ARM_CLIENT_ID",
    "ARM_USE_OIDC",
    "ARM_USE_MSI",
    "AZURE_CLIENT_ID",
    "AZURE_FEDERATED_TOKEN_FILE",
)

BASTION_PROXY = """#!/bin/sh
# gpufleet: SSH to a node of cluster {cluster} through Azure Bastion (no public IP on any VM, no open port).
# Usage (as an SSH ProxyCommand): {script} <private-ip> <port>
set -eu
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
az network bastion tunnel --subscription {subscription} --resource-group {group} --name {bastion} \\
  --target-ip-address "$1" --resource-port "$2" --port "$port" >/dev/null 2>&1 &
tunnel=$!
trap 'kill "$tunnel" 2>/dev/null || true' EXIT INT TERM
tries=0
probe='import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()'
until python3 -c "$probe" "$port" 2>/dev/null; do
  tries=$((tries + 1))
  if [ "$tries" -ge 60 ] || ! kill -0 "$tunnel" 2>/dev/null; then
    echo "gpufleet: Azure Bastion tunnel to $1 did not open (az network bastion tunnel)" >&2
    exit 255
  fi
  sleep 1
done
nc 127.0.0.1 "$port"
"""


def _provider(spec: ClusterSpec) -> AzureProvider:
    assert isinstance(spec.provider, AzureProvider)
    return spec.provider


def credentials_present() -> bool:
    """A service principal or workload identity in the environment, or an Azure CLI login."""
    if any(os.environ.get(variable) for variable in CREDENTIAL_VARIABLES):
        return True
    config = Path(os.environ.get("AZURE_CONFIG_DIR") or Path.home() / ".azure")
    return (config / "azureProfile.json").is_file() and (config / "msal_token_cache.json").is_file()


class AzureBackend(PulumiBackend):
    kind = "azure"

    def program(
        self,
        spec: ClusterSpec,
        created_at: datetime,
        ssh_keys: Sequence[str],
        baked: CloudImage | None = None,
        cluster_id: str = PLAN_CLUSTER_ID,
    ) -> dict[str, Any]:
        from gpufleet.infra.azure.component import GpuClusterAzure, GpuClusterAzureArgs

        args = GpuClusterAzureArgs(
            spec=spec, created_at=created_at, ssh_keys=tuple(ssh_keys), cluster_id=cluster_id
        )
        return GpuClusterAzure(spec.name, args).stack_outputs

    @property
    def images(self) -> BakeSource:
        """No builder yet: the table keeps every bake away from Azure (``bakes_in_cloud``); were one asked,
        it would be told why rather than handed a source that finds nothing."""
        raise SpecError(
            "gpufleet bakes no Azure images yet: Azure nodes boot Microsoft's HPC image or provider.image",
            hint="build an image with Azure/azhpc-images' Packer files or Azure Image Builder and give its "
            "id as provider.image.id (docs/azure.md, 'Images')",
        )

    def mock_cloud(self, spec: ClusterSpec) -> MockCloud:
        from gpufleet.infra.azure.mocks import AzureMockCloud

        return AzureMockCloud(spec)

    def provider_config(self, spec: ClusterSpec) -> dict[str, str]:
        provider = _provider(spec)
        return {
            "azure-native:subscriptionId": provider.subscription,
            "azure-native:location": provider.location,
        }

    def check_credentials(self, spec: ClusterSpec) -> None:
        if not credentials_present():
            raise EnvironmentProblem(
                "no Azure credentials found (ARM_CLIENT_ID / AZURE_CLIENT_ID, ARM_USE_OIDC, or 'az login')",
                hint="run 'az login' and 'az account set --subscription ID'; in CI use azure/login with OIDC "
                "and set ARM_USE_OIDC=true, ARM_CLIENT_ID, ARM_TENANT_ID (docs/azure.md)",
            )

    def check_tools(self, spec: ClusterSpec) -> None:
        """SSH reaches the nodes through ``az network bastion tunnel``: the Azure CLI and ``nc``."""
        missing = [tool for tool in ("az", "nc") if shutil.which(tool) is None]
        if missing:
            raise EnvironmentProblem(
                f"{' and '.join(missing)} not found: gpufleet reaches Azure nodes through Azure Bastion "
                "('az network bastion tunnel') and relays SSH with nc",
                hint="install the Azure CLI (https://learn.microsoft.com/cli/azure/install-azure-cli) and "
                "netcat-openbsd; 'az extension add --name bastion' adds the tunnel command",
            )

    def connection(self, spec: ClusterSpec, state: ClusterState) -> Connection:
        """The cluster key through a Bastion tunnel to each node's private IP (``BASTION_PROXY``)."""
        from gpufleet.infra.azure.component import resource_group_name

        provider = _provider(spec)
        key = str(state.private_key) if state.private_key.exists() else None
        script = state.ssh_dir / "bastion-proxy.sh"
        state.ssh_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        script.write_text(
            BASTION_PROXY.format(
                cluster=spec.name,
                subscription=provider.subscription,
                group=resource_group_name(spec.name),
                bastion=f"{spec.name}-bastion",
                script=script,
            ),
            encoding="utf-8",
        )
        script.chmod(0o700)
        return Connection(
            user=IMAGE_USER,
            become=True,
            private_key_file=key,
            ssh_common_args=f'{known_hosts_args(state)} -o ProxyCommand="{script} %h %p"',
        )

    expiry_scope = "subscription"

    def find_expired(self, scope: str) -> list[ExpiredCluster]:
        from gpufleet.infra.azure import leftovers

        return leftovers.find_expired(scope)

    def find_leftovers(self, spec: ClusterSpec, cluster_id: str | None = None) -> list[Leftover]:
        from gpufleet.infra.azure import leftovers

        return leftovers.find_leftovers(spec.name, _provider(spec).subscription, cluster_id=cluster_id)


# The table's row: the type checker holds it to the ``Backend`` protocol.
backend: Backend = AzureBackend()
