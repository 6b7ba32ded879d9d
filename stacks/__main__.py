"""Entry point of the gpufleet Pulumi project: ``pulumi up`` in this folder builds one cluster.

Stack config (the only place gpufleet reads ``pulumi.Config``):
- ``gpufleet:spec``: the cluster spec file, relative to this folder;
- ``gpufleet:createdAt``: when the cluster was first made, ISO 8601 in UTC. The expiry tag is
  createdAt + the spec's ttl. No shipped stack file sets it: ``gpufleet stack-pin --stack NAME`` writes it
  before each ``pulumi up`` (the stack's own ``created_at`` output on a later up, the time now on the
  first), so the expiry set at the first up is kept. Without it the time of the run is used, with a
  warning;
- ``gpufleet:clusterId``: the cluster's id, tagged on every resource (``gpufleet.state``); ``gpufleet
  stack-pin`` writes it with createdAt (the stack's ``cluster_id`` output on a later up, a new id on the
  first). Without it the id is derived from the project, stack and createdAt;
- ``gpufleet:sshPrivateKey`` (optional, a secret): the OpenSSH key gpufleet reaches the nodes with.
  Without it the stack makes its own (pulumi-tls, kept in the stack's state). Either way its public key
  is authorized on every node and the private key is the secret output ``ssh_private_key``, which
  ``gpufleet adopt`` writes into the cluster's state folder (``gpufleet.infra.stack_access``);
- ``gpufleet:useBakedImage`` (default true): boot the image ``gpufleet image build`` baked from the spec's
  roles and pins when the region (AWS) or project (GCP) has one, as ``gpufleet up`` does; false boots the
  base image, and configure then installs.
"""

from __future__ import annotations

from pathlib import Path

import pulumi

from gpufleet.bake.cloud import find_baked_in_program
from gpufleet.infra import outputs, program, stack_access
from gpufleet.spec import load_spec

HERE = Path(__file__).resolve().parent


def main() -> None:
    config = pulumi.Config("gpufleet")
    spec_path = Path(config.require("spec"))
    if not spec_path.is_absolute():
        spec_path = HERE / spec_path
    spec = load_spec(spec_path)
    pinned = config.get(stack_access.CREATED_CONFIG)
    created = stack_access.created_at(pinned)
    if pinned is None:
        pulumi.log.warn(
            "gpufleet:createdAt is not set: the expiry tag counts from now; run 'gpufleet stack-pin --stack "
            f"{pulumi.get_stack()}' before 'pulumi up' to keep the time of the stack's first up"
        )
    cluster_id = stack_access.cluster_id(
        config.get(stack_access.CLUSTER_ID_CONFIG), pulumi.get_project(), pulumi.get_stack(), created
    )
    key = stack_access.stack_key(spec.name, config.get_secret(stack_access.KEY_CONFIG))
    baked = find_baked_in_program(spec) if config.get_bool("useBakedImage") is not False else None
    outputs.export_outputs(
        program.cluster_program(spec, created, ssh_keys=(key.public,), baked=baked, cluster_id=cluster_id)
    )
    pulumi.export(stack_access.ACCESS_KEY_OUTPUT, key.private)
    pulumi.export(stack_access.CREATED_OUTPUT, stack_access.iso(created))


main()
