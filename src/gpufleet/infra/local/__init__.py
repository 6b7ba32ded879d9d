"""The local backend: a real multi-node cluster of podman containers on this machine."""
