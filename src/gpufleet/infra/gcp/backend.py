"""``backend`` for ``provider: gcp``: the GCP side of the Pulumi driver (``gpufleet.infra.automation``).

Its program is ``GpuClusterGcp``; the stack's default provider gets the project, region and zone;
credentials are Application Default Credentials (or a token in the environment); nodes have no external
IP, so SSH goes through an IAP TCP tunnel, which names the instance: the inventory's address of a host is
its instance name. The leftover finder is ``gpufleet.infra.gcp.leftovers`` (Cloud Asset Inventory).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from gpufleet.bake.cloud import CloudBaker
from gpufleet.bake.key import BakeRequest
from gpufleet.errors import EnvironmentProblem
from gpufleet.infra.automation import PulumiBackend, known_hosts_args
from gpufleet.infra.images import CloudImage
from gpufleet.infra.leftovers import ExpiredCluster, Leftover
from gpufleet.infra.plan import MockCloud
from gpufleet.infra.userdata import IMAGE_USER
from gpufleet.inventory.model import Connection
from gpufleet.spec.model import ClusterSpec, GcpProvider, NodeGroup
from gpufleet.state import ClusterState

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

    def program(
        self,
        spec: ClusterSpec,
        created_at: datetime,
        ssh_keys: Sequence[str],
        baked: CloudImage | None = None,
    ) -> dict[str, Any]:
        from gpufleet.infra.gcp.component import GpuClusterGcp, GpuClusterGcpArgs

        args = GpuClusterGcpArgs(spec=spec, created_at=created_at, ssh_keys=tuple(ssh_keys), baked=baked)
        return GpuClusterGcp(spec.name, args).stack_outputs

    # ---- baked images -------------------------------------------------------------------------------

    # 8 vCPUs for the DKMS and nccl-tests builds; offered in every region with GPUs (docs/gcp.md).
    builder_cpu_type = "n2-standard-8"

    @property
    def baker(self) -> CloudBaker:
        """Its baked images, made by this driver's builder program (``gpufleet.bake.cloud``)."""
        return CloudBaker(self)

    def bake_base(self, spec: ClusterSpec) -> str:
        from gpufleet.bake.key import bake_group
        from gpufleet.infra.gcp.compute import base_image

        return base_image(spec, bake_group(spec).instance_type)

    def bake_host(self, spec: ClusterSpec, group: NodeGroup) -> dict[str, Any]:
        from gpufleet.bake.key import BUILDER_ROLES
        from gpufleet.catalog import load_catalog
        from gpufleet.catalog.gcp import nic_layout
        from gpufleet.infra.gcp.compute import image_manifest
        from gpufleet.infra.outputs import host_record

        item = load_catalog().get(group.instance_type)
        return host_record(
            name=f"{spec.name}-builder",
            roles=BUILDER_ROLES,
            private_ip="",
            instance_type=group.instance_type,
            item=item,
            fabric_interfaces=nic_layout(spec, group, item).gpu_nics,
            image=image_manifest(spec, group.instance_type),
        )

    def builder_program(self, request: BakeRequest) -> dict[str, Any]:
        from gpufleet.infra.gcp.image_builder import ImageBuilderGcp

        return ImageBuilderGcp(request.name, request).stack_outputs

    def image_source(self, outputs: dict[str, Any]) -> str:
        return str(outputs["boot_disk"])

    def image_scope(self, spec: ClusterSpec) -> str:
        return _provider(spec).project

    def baked_by_invoke(self, spec: ClusterSpec, digest: str) -> CloudImage | None:
        import pulumi_gcp as gcp

        from gpufleet.infra.tags import GCP_IMAGE_BASE_LABEL, GCP_IMAGE_HASH_LABEL

        found = gcp.compute.get_images(
            # a label value holds 63 characters: the hash's first 63 (gpufleet.infra.images.matches)
            filter=f"labels.{GCP_IMAGE_HASH_LABEL}={digest[:63]}",
            project=_provider(spec).project,
        )
        if not found.images:
            return None
        newest = max(found.images, key=lambda image: image.creation_timestamp)
        labels = newest.labels or {}
        return CloudImage(
            id=newest.name,
            name=newest.self_link,
            digest=labels.get(GCP_IMAGE_HASH_LABEL, digest[:63]),
            base=labels.get(GCP_IMAGE_BASE_LABEL, ""),
            created=newest.creation_timestamp,
        )

    def list_images(self, scope: str) -> list[CloudImage]:
        from gpufleet.infra.gcp import images

        return images.list_images(scope)

    def delete_image(self, scope: str, image: CloudImage) -> list[str]:
        from gpufleet.infra.gcp import images

        return images.delete_image(scope, image)

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

    def find_leftovers(self, spec: ClusterSpec) -> list[Leftover]:
        from gpufleet.infra.gcp import leftovers

        return leftovers.find_leftovers(spec.name, _provider(spec).project)


backend = GcpBackend()
