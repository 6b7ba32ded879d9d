"""The Azure Resource Manager credential of the leftover check, the expiry sweep and the Lustre archive
(infra/azure/arm.py) outlasts a long reaper job: in GitHub Actions it asks GitHub for a new OIDC token
at each refresh, where the CLI login that azure/login leaves holds one token and cannot renew once the
access token made from it runs out (https://github.com/Azure/login/issues/180, read 2026-11-27).

Entra ID's token endpoint is answered by a fake azure-core transport (the OAuth 2.0 client-credentials
answer: access_token, expires_in, token_type); GitHub's OIDC endpoint by a fake ``get``."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from azure.core.pipeline.transport import HttpResponse, HttpTransport
from azure.identity import ClientAssertionCredential, DefaultAzureCredential

from gpufleet.errors import EnvironmentProblem
from gpufleet.infra.azure.arm import ENTRA_AUDIENCE, SCOPE, arm_credential, github_assertion

GITHUB = {
    "ACTIONS_ID_TOKEN_REQUEST_URL": "https://token.actions.example/token?api-version=2.0",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "request-token",
    "ARM_CLIENT_ID": "fedcba09-8765-4321-fedc-ba0987654321",
    "ARM_TENANT_ID": "99999999-8888-7777-6666-555555555555",
}


class _Answer(HttpResponse):
    def __init__(self, request: Any, body: dict[str, Any]) -> None:
        super().__init__(request, None)
        self.status_code = 200
        self.reason = "OK"
        self.headers = {"Content-Type": "application/json"}
        self.content_type = "application/json"
        self._body = json.dumps(body).encode()

    def body(self) -> bytes:
        return self._body


class _Entra(HttpTransport):
    """Entra ID's token endpoint: notes each client assertion, answers tokens that last one second."""

    def __init__(self) -> None:
        self.assertions: list[str] = []

    def __enter__(self) -> _Entra:
        return self

    def __exit__(self, *args: object) -> None:
        return None

    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    def send(self, request: Any, **kwargs: Any) -> _Answer:
        assert request.url == f"https://login.microsoftonline.com/{GITHUB['ARM_TENANT_ID']}/oauth2/v2.0/token"
        form = request.data  # azure-core keeps a form body as a dict until it is sent
        assert form["client_id"] == GITHUB["ARM_CLIENT_ID"] and form["scope"] == SCOPE, form
        self.assertions.append(form["client_assertion"])
        n = len(self.assertions)
        return _Answer(request, {"access_token": f"arm-{n}", "expires_in": 1, "token_type": "Bearer"})


def _github() -> tuple[list[tuple[str, str]], Any]:
    asked: list[tuple[str, str]] = []

    def get(url: str, bearer: str) -> dict[str, Any]:
        asked.append((url, bearer))
        return {"value": f"github-jwt-{len(asked)}"}

    return asked, get


def test_in_github_actions_every_refresh_asks_github_for_a_new_token():
    """Failed before infra/azure/arm.arm_credential: the reaper's ARM calls went through the CLI login of
    azure/login, one GitHub token for a job of up to four hours."""
    asked, get = _github()
    entra = _Entra()
    credential = arm_credential(GITHUB, get, transport=entra)
    assert isinstance(credential, ClientAssertionCredential)
    assert credential.get_token(SCOPE).token == "arm-1"
    time.sleep(1.2)  # the first access token has run out
    assert credential.get_token(SCOPE).token == "arm-2"
    assert entra.assertions == ["github-jwt-1", "github-jwt-2"], "a refresh reused an old GitHub token"
    url = f"{GITHUB['ACTIONS_ID_TOKEN_REQUEST_URL']}&audience={ENTRA_AUDIENCE}"
    assert asked == [(url, "request-token")] * 2


def test_outside_github_actions_the_default_credential_is_used():
    assert github_assertion({"ARM_CLIENT_ID": "x"}) is None
    without_app = {k: v for k, v in GITHUB.items() if not k.startswith("ARM_")}
    assert isinstance(arm_credential(without_app), DefaultAzureCredential)
    assert isinstance(arm_credential({}), DefaultAzureCredential)


def test_a_job_without_id_token_permission_is_told_so():
    assertion = github_assertion(GITHUB, lambda url, bearer: {"message": "not allowed"})
    assert assertion is not None
    with pytest.raises(EnvironmentProblem) as raised:
        assertion()
    assert "id-token: write" in (raised.value.hint or "")
