"""Calls to Azure Resource Manager's REST API: one authorized ``Http`` for the leftover check, the expiry
sweep and the Managed Lustre archive. Creates nothing.

The token is Microsoft Entra ID's for ``https://management.azure.com/.default``. In a GitHub Actions job
that may ask for an OIDC token (``permissions: id-token: write``) with an app registration named in
``ARM_CLIENT_ID``/``ARM_TENANT_ID`` (or ``AZURE_*``), it is a ``ClientAssertionCredential`` that asks
GitHub for a fresh token at each refresh (``github_assertion``); elsewhere azure-identity's
``DefaultAzureCredential`` (environment variables of a service principal or workload identity, a managed
identity, or the Azure CLI's ``az login``). requests sends the calls. Tests pass a fake ``Http`` answering
in the shapes the REST reference documents.

Why not the CLI login that ``azure/login`` leaves: it holds the one GitHub token it was given, and once
the access token made from it runs out (an hour or so) the CLI cannot renew it ("AADSTS700024: Client
assertion is not within its valid time range", https://github.com/Azure/login/issues/180 and #372, read
2026-11-27): a reaper that exports a Managed Lustre for up to an hour and then destroys would meet it in
its leftover check. azure-native renews its own way (``ARM_USE_OIDC``: it asks GitHub again).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gpufleet.errors import EnvironmentProblem

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

ARM = "https://management.azure.com"
SCOPE = f"{ARM}/.default"
# Http(method, url, json body or None) -> (HTTP status, the JSON answer or {}).
Http = Callable[[str, str, dict[str, Any] | None], tuple[int, dict[str, Any]]]
# The audience Microsoft Entra ID expects of a federated credential's token ("Configure an app to trust an
# external identity provider", https://learn.microsoft.com/en-us/entra/workload-id/
# workload-identity-federation-create-trust, read 2026-11-27).
ENTRA_AUDIENCE = "api://AzureADTokenExchange"
# Get(url, bearer token) -> the JSON answer of GitHub's OIDC token endpoint ({"value": the JWT}).
Get = Callable[[str, str], dict[str, Any]]


def _get(url: str, bearer: str) -> dict[str, Any]:
    import requests

    try:
        answer = requests.get(url, headers={"Authorization": f"bearer {bearer}"}, timeout=30)
        answer.raise_for_status()
        data = answer.json()
    except (requests.RequestException, ValueError) as exc:
        raise EnvironmentProblem(
            f"GitHub's OIDC token endpoint failed: {str(exc).splitlines()[0][:300]}",
            hint="give the job 'permissions: id-token: write', and run it again",
        ) from None
    return data if isinstance(data, dict) else {}


def github_assertion(env: Mapping[str, str], get: Get = _get) -> Callable[[], str] | None:
    """In a GitHub Actions job allowed to ask for an OIDC token (``ACTIONS_ID_TOKEN_REQUEST_URL`` and
    ``_TOKEN``, which GitHub sets under ``id-token: write``), a function that asks for a new one with
    Entra ID's audience each time it is called (the runner's documented request: the URL with
    ``&audience=``, the request token as a bearer; the answer's ``value``); else None."""
    url = env.get("ACTIONS_ID_TOKEN_REQUEST_URL")
    bearer = env.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN")
    if not url or not bearer:
        return None

    def assertion() -> str:
        token = get(f"{url}&audience={ENTRA_AUDIENCE}", bearer).get("value")
        if not isinstance(token, str) or not token:
            raise EnvironmentProblem(
                "GitHub's OIDC token endpoint answered without a token",
                hint="give the job 'permissions: id-token: write'",
            )
        return token

    return assertion


def arm_credential(env: Mapping[str, str] = os.environ, get: Get = _get, **options: Any) -> TokenCredential:
    """The credential of ``session_http`` (module docstring): GitHub's OIDC token, asked for anew at each
    refresh, where the job has one and names the app registration; else ``DefaultAzureCredential``.
    ``options`` go to the credential (azure-core's, such as ``transport``)."""
    from azure.identity import ClientAssertionCredential, DefaultAzureCredential

    assertion = github_assertion(env, get)
    client = env.get("AZURE_CLIENT_ID") or env.get("ARM_CLIENT_ID")
    tenant = env.get("AZURE_TENANT_ID") or env.get("ARM_TENANT_ID")
    if assertion is not None and client and tenant:
        return ClientAssertionCredential(tenant, client, assertion, **options)
    return DefaultAzureCredential(exclude_interactive_browser_credential=True, **options)


def session_http(purpose: str) -> Http:
    """An ``Http`` with a bearer token of ``arm_credential`` (refreshed when it runs out)."""
    import requests
    from azure.core.exceptions import ClientAuthenticationError
    from azure.identity import CredentialUnavailableError

    credential = arm_credential()

    def token() -> str:
        try:
            return credential.get_token(SCOPE).token
        except (CredentialUnavailableError, ClientAuthenticationError) as exc:
            raise EnvironmentProblem(
                f"no Azure credentials for {purpose}: {str(exc).splitlines()[0][:300]}",
                hint="run 'az login' (and 'az account set --subscription ID'), or set AZURE_CLIENT_ID, "
                "AZURE_TENANT_ID and a secret or federated token (in CI: azure/login with OIDC)",
            ) from None

    def call(method: str, url: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        answer = requests.request(
            method, url, json=body, headers={"Authorization": f"Bearer {token()}"}, timeout=60
        )
        try:
            data = answer.json() if answer.content else {}
        except ValueError:
            data = {"error": {"message": answer.text[:400]}}
        return answer.status_code, data if isinstance(data, dict) else {"value": data}

    return call


def error_message(answer: dict[str, Any]) -> str:
    """ARM's error body (``{"error": {"code", "message"}}``) as one line."""
    error = answer.get("error") or {}
    code = error.get("code")
    return (f"{code}: " if code else "") + str(error.get("message") or answer)[:400]
