"""How a cluster made by ``pulumi up`` in ``stacks/`` (CI) lets gpufleet in, and when it was first made.

Creates, in the stack's program (``stacks/__main__.py``), at most one resource:
- ``<cluster>-ssh-key``: a pulumi-tls ``PrivateKey`` (ED25519) made once per stack and kept in the stack's
  state, unless the stack config holds a key of its own as the secret ``gpufleet:sshPrivateKey`` (an
  OpenSSH private key: ``pulumi config set --secret gpufleet:sshPrivateKey < key``).

Its public key is authorized on every node through the user data, as ``gpufleet up`` authorizes the
cluster's own key; the private key is exported as the SECRET output ``ssh_private_key``, which
``gpufleet adopt`` writes into the cluster's state folder (mode 0600). Nothing here logs a key. Nodes keep
no public IP: SSH still goes through SSM (AWS) or IAP (GCP), as each cloud's backend says.

The stack also exports ``created_at`` (ISO 8601, UTC): the time its expiry counts from. ``gpufleet
stack-pin`` reads it back before a later ``pulumi up`` and writes it into the stack's config
(``gpufleet:createdAt``), so the expiry set at the first ``up`` of a stack is kept.

pulumi-tls (PyPI ``pulumi-tls``; resource token ``tls:index/privateKey:PrivateKey``, outputs
``privateKeyOpenssh`` (secret) and ``publicKeyOpenssh``, which ends in a newline:
pulumi_tls/private_key.py of pulumi-tls 5.6.2, read 2026-11-24) is imported only when the stack makes
its key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a program runs (stack_key): adopted.py reads the names below without it
    import pulumi

# The outputs the stacks/ program exports besides ``inventory.stack.OUTPUT_KEYS``.
ACCESS_KEY_OUTPUT = "ssh_private_key"
CREATED_OUTPUT = "created_at"
# The stack config (namespace ``gpufleet``) that holds a key given by the user, as a Pulumi secret.
KEY_CONFIG = "sshPrivateKey"
CREATED_CONFIG = "createdAt"
TLS_PRIVATE_KEY = "tls:index/privateKey:PrivateKey"
# What ``pulumi stack output --json`` prints for a secret without ``--show-secrets`` (the example in
# github.com/pulumi/pulumi/issues/14576, CLI 3.94.0: ``"password": "[secret]"``; read 2026-11-24).
MASKED_SECRET = "[secret]"


@dataclass(frozen=True)
class StackKey:
    public: pulumi.Input[str]  # an OpenSSH public key ("ssh-ed25519 AAAA..."), authorized on every node
    private: pulumi.Output[str]  # the OpenSSH private key, a secret


def public_of(private_openssh: str) -> str:
    """The OpenSSH public key of an OpenSSH private key (the format ``ssh-keygen`` writes)."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_ssh_private_key(private_openssh.encode(), password=None)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return public.decode()


def stack_key(cluster: str, configured: pulumi.Output[str] | None) -> StackKey:
    """The stack's key: ``configured`` (the secret config's), else a pulumi-tls key made once per stack."""
    import pulumi

    if configured is not None:
        return StackKey(public=pulumi.Output.unsecret(configured.apply(public_of)), private=configured)
    try:
        import pulumi_tls as tls
    except ImportError:
        from gpufleet.errors import EnvironmentProblem

        raise EnvironmentProblem(
            "the stack makes its SSH key with pulumi-tls, which is not installed where the program runs",
            hint="pip install pulumi-tls (gpufleet's dependencies include it), or give the stack a key: "
            "pulumi config set --secret gpufleet:sshPrivateKey < id_ed25519",
        ) from None
    made = tls.PrivateKey(f"{cluster}-ssh-key", algorithm="ED25519")
    return StackKey(
        public=made.public_key_openssh.apply(lambda text: (text or "").strip()),
        private=pulumi.Output.secret(made.private_key_openssh),
    )


def created_at(configured: str | None, now: datetime | None = None) -> datetime:
    """``gpufleet:createdAt`` as a time (UTC), or ``now`` (to the minute) when the config has none."""
    from gpufleet.errors import SpecError

    if configured is None:
        return (now or datetime.now(UTC)).replace(second=0, microsecond=0)
    try:
        value = datetime.fromisoformat(configured.replace("Z", "+00:00"))
    except ValueError:
        raise SpecError(
            f"gpufleet:createdAt is {configured!r}, not an ISO 8601 time",
            hint="pulumi config rm gpufleet:createdAt (gpufleet stack-pin sets it), or set an ISO 8601 time "
            "such as 2026-11-22T09:00:00Z",
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def mock_private_key(inputs: dict[str, Any]) -> dict[str, Any]:
    """What pulumi-tls computes for a new ED25519 ``PrivateKey``, for Pulumi's mocks: a real key pair in
    the provider's output fields (OpenSSH private key, authorized-keys line ending in a newline, PEMs)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    if inputs.get("algorithm") != "ED25519":
        raise NotImplementedError(f"mock tls PrivateKey: only ED25519, not {inputs.get('algorithm')}")
    key = ed25519.Ed25519PrivateKey.generate()
    public = key.public_key()
    openssh = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    return {
        "privateKeyOpenssh": openssh,
        "privateKeyPem": key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode(),
        "publicKeyOpenssh": public.public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        ).decode()
        + "\n",
        "publicKeyPem": public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode(),
    }


def contract_outputs(exported: dict[str, Any]) -> dict[str, Any]:
    """The outputs of the inventory's contract (``inventory.stack.OUTPUT_KEYS``) out of all a stack exports:
    ``ssh_private_key``, ``created_at`` and whatever else a project using the component adds stay out."""
    from gpufleet.inventory.stack import OUTPUT_KEYS

    return {key: exported[key] for key in OUTPUT_KEYS if key in exported}
