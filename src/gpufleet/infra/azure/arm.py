"""Calls to Azure Resource Manager's REST API: one authorized ``Http`` for the leftover check, the expiry
sweep and the Managed Lustre archive. Creates nothing.

The token is Microsoft Entra ID's for ``https://management.azure.com/.default`` from azure-identity's
``DefaultAzureCredential`` (environment variables of a service principal or workload identity, a managed
identity, or the Azure CLI's ``az login``); requests sends the calls. Tests pass a fake ``Http`` answering
in the shapes the REST reference documents.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpufleet.errors import EnvironmentProblem

ARM = "https://management.azure.com"
SCOPE = f"{ARM}/.default"
# Http(method, url, json body or None) -> (HTTP status, the JSON answer or {}).
Http = Callable[[str, str, dict[str, Any] | None], tuple[int, dict[str, Any]]]


def session_http(purpose: str) -> Http:
    """An ``Http`` with a bearer token of ``DefaultAzureCredential`` (refreshed when it runs out)."""
    import requests
    from azure.core.exceptions import ClientAuthenticationError
    from azure.identity import CredentialUnavailableError, DefaultAzureCredential

    credential = DefaultAzureCredential(exclude_interactive_browser_credential=True)

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
