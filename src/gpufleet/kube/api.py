"""The few Kubernetes API calls gpufleet makes, as plain JSON, through the official client's configuration.

The ``kubernetes`` package (imported here only, on first use, so ``gpufleet --help`` and ``check`` of a Slurm
spec never load it) reads the kubeconfig exactly as kubectl does: a context's cluster, certificates, tokens,
and the exec credential plugins managed clusters use (``aws eks get-token``, ``gke-gcloud-auth-plugin``,
``kubelogin``), refreshed before each call. Requests and answers stay JSON dicts on paths of the Kubernetes
REST API (kubernetes.io "API Concepts"), so what the adapter sends is what a reviewer reads in the manifests,
and the tests' fake API server answers the same paths.

Errors: ``KubeUnreachable`` (the kubeconfig cannot be read, or the API server does not answer) and
``KubeApiError`` (the server answered with an error status, e.g. 404 or 403), both ``ValidationRunError``s
(exit 6) whose message names the server, the path and the fix.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from gpufleet.errors import ValidationRunError

if TYPE_CHECKING:
    from gpufleet.spec.model import ClusterSpec

Json = dict[str, Any]
DEFAULT_TIMEOUT = 30.0  # seconds for one API call (not for a job: jobs are polled)


class KubeUnreachable(ValidationRunError):
    """No answer from the cluster: kubeconfig, context, credentials or network."""


class KubeApiError(ValidationRunError):
    """The API server answered with an error status."""

    def __init__(self, message: str, *, status: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status


def kubeconfig_path(kubeconfig: str | None) -> Path:
    """The spec's kubeconfig, else $KUBECONFIG (its first file), else ~/.kube/config, as kubectl finds it."""
    if kubeconfig:
        return Path(kubeconfig).expanduser()
    env = os.environ.get("KUBECONFIG", "")
    first = next((part for part in env.split(os.pathsep) if part), None)
    return Path(first).expanduser() if first else Path.home() / ".kube" / "config"


_UNREACHABLE_HINT = (
    "check the kubeconfig and context (kubectl --context <context> get nodes must work from this machine): "
    "on EKS `aws eks update-kubeconfig --name <cluster>`, on GKE `gcloud container clusters get-credentials "
    "<cluster>`, on AKS `az aks get-credentials --name <cluster> --resource-group <group>`"
)


class KubeApi:
    """A Kubernetes API server, reached as the kubeconfig's context says."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        from kubernetes import config as kube_config
        from kubernetes.client import ApiClient, Configuration

        path = kubeconfig_path(kubeconfig)
        if not path.is_file():
            raise KubeUnreachable(f"the kubeconfig {path} does not exist", hint=_UNREACHABLE_HINT)
        configuration = Configuration()
        try:
            kube_config.load_kube_config(
                config_file=str(path), context=context, client_configuration=configuration
            )
        except (kube_config.ConfigException, OSError, ValueError) as exc:
            where = f"context '{context}'" if context else "its current-context"
            raise KubeUnreachable(
                f"cannot use {where} of the kubeconfig {path}: {exc}", hint=_UNREACHABLE_HINT
            ) from None
        self.host = str(configuration.host)
        self.context = context
        self._client = ApiClient(configuration)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = DEFAULT_TIMEOUT,
    ) -> bytes:
        """One call; the answer's body, or ``KubeApiError`` / ``KubeUnreachable``."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        resource = path + (f"?{urlencode(dict(query))}" if query else "")
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            _method, url, headers, _body, _post = self._client.param_serialize(
                method, resource, header_params=headers, auth_settings=["BearerToken"]
            )
            # the client's REST layer serializes a JSON body (merge-patch+json included) itself
            response = self._client.call_api(method, url, headers, body, _request_timeout=timeout)
            data = response.read()
        except ApiException as exc:
            raise self._error(method, path, int(exc.status or 0), exc.reason, exc.body) from None
        except (HTTPError, OSError) as exc:
            raise KubeUnreachable(
                f"the Kubernetes API server {self.host} does not answer ({method} {path}): {exc}",
                hint=_UNREACHABLE_HINT,
            ) from None
        status = int(response.status)
        if status >= 400:
            raise self._error(method, path, status, response.reason, data)
        return bytes(data or b"")

    def _error(self, method: str, path: str, status: int, reason: Any, body: Any) -> KubeApiError:
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
        try:
            message = str(json.loads(text).get("message") or text)
        except (ValueError, AttributeError):
            message = text
        hint = None
        if status in (401, 403):
            hint = (
                "the kubeconfig's user may not do this: docs/kubernetes.md lists the permissions gpufleet "
                "needs (create and delete pods, configmaps and mpijobs in the namespace; get, list and patch "
                "nodes)"
            )
        return KubeApiError(
            f"{method} {path} on {self.host}: {status} {reason or ''}: {message[:400]}".replace("  ", " "),
            status=status,
            hint=hint,
        )

    def get(self, path: str, query: Mapping[str, str] | None = None) -> Json:
        return _object(self.request("GET", path, query=query))

    def get_or_none(self, path: str) -> Json | None:
        """The object at ``path``, or None when there is none (404)."""
        try:
            return self.get(path)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, path: str, label_selector: str | None = None) -> list[Json]:
        """Every item of a collection, ``label_selector`` applied by the server."""
        query = {"labelSelector": label_selector} if label_selector else None
        items = self.get(path, query).get("items") or []
        return [item for item in items if isinstance(item, dict)]

    def create(self, path: str, body: Json) -> Json:
        return _object(self.request("POST", path, body=body))

    def delete(self, path: str) -> bool:
        """Delete with its dependents (the objects it owns) in the background; False when it was not there."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        try:
            self.request("DELETE", path, body=body)
        except KubeApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def patch(self, path: str, body: Json) -> Json:
        """A JSON merge patch (RFC 7386): maps merge, lists are replaced whole."""
        return _object(self.request("PATCH", path, body=body, content_type="application/merge-patch+json"))

    def log(self, namespace: str, pod: str, *, limit_bytes: int = 64 << 20) -> str:
        """The pod's (first container's) log."""
        data = self.request(
            "GET",
            f"/api/v1/namespaces/{namespace}/pods/{pod}/log",
            query={"limitBytes": str(limit_bytes)},
        )
        return data.decode("utf-8", "replace")


def _object(data: bytes) -> Json:
    try:
        value = json.loads(data or b"{}")
    except ValueError as exc:
        raise ValidationRunError(
            f"the Kubernetes API answered with something that is not JSON: {exc}"
        ) from None
    if not isinstance(value, dict):
        raise ValidationRunError("the Kubernetes API answered with something that is not an object")
    return value


def api_for(spec: ClusterSpec) -> KubeApi:
    """The API server of a ``kubernetes`` spec's kubeconfig and context: here, in the leaf, so that preflight,
    infra/kubernetes and validate/kubernetes reach it without importing each other."""
    from gpufleet.spec.model import KubernetesProvider

    provider = spec.provider
    assert isinstance(provider, KubernetesProvider)
    return KubeApi(provider.kubeconfig, provider.context)
