"""Entry point of the gpufleet Pulumi project: ``pulumi up`` in this folder builds one cluster.

Stack config (the only place gpufleet reads ``pulumi.Config``):
- ``gpufleet:spec``: the cluster spec file, relative to this folder;
- ``gpufleet:createdAt``: when the cluster was first made, ISO 8601 in UTC. The expiry tag is
  createdAt + the spec's ttl, so pinning it keeps the tag still across runs. Without it the time of
  the run is used, with a warning (every ``pulumi up`` would then push the expiry out);
- ``gpufleet:useBakedImage`` (default true): boot the image ``gpufleet image build`` baked from the spec's
  roles and pins when the region (AWS) or project (GCP) has one, as ``gpufleet up`` does; false boots the
  base image, and configure then installs.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pulumi

from gpufleet.errors import SpecError
from gpufleet.infra import outputs, program
from gpufleet.spec import load_spec

HERE = Path(__file__).resolve().parent


def created_at(config: pulumi.Config) -> datetime:
    text = config.get("createdAt")
    if text is None:
        now = datetime.now(UTC).replace(second=0, microsecond=0)
        pulumi.log.warn(
            "gpufleet:createdAt is not set: the expiry tag counts from now and moves on every run; pin it "
            f"with: pulumi config set gpufleet:createdAt {now.strftime('%Y-%m-%dT%H:%M:%SZ')}"
        )
        return now
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SpecError(
            f"gpufleet:createdAt is {text!r}, not an ISO 8601 time",
            hint="pulumi config set gpufleet:createdAt 2026-11-22T09:00:00Z",
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def main() -> None:
    config = pulumi.Config("gpufleet")
    spec_path = Path(config.require("spec"))
    if not spec_path.is_absolute():
        spec_path = HERE / spec_path
    spec = load_spec(spec_path)
    baked = program.find_baked_in_program(spec) if config.get_bool("useBakedImage") is not False else None
    outputs.export_outputs(program.cluster_program(spec, created_at(config), baked=baked))


main()
