"""A fake of Azure Resource Manager's REST API for the leftover check and the Managed Lustre archive, in the
shapes the REST reference documents (read 2026-11-27):
- Resource Groups - Get: 200 ``{id, name, type, location, properties: {provisioningState}, tags}``, 404
  ``{"error": {"code": "ResourceGroupNotFound", "message": ...}}``;
- Resource Graph resources (api-version 2022-10-01): ``{totalRecords, count, resultTruncated, $skipToken,
  data: [...], facets: []}``, the next page asked for with ``options.$skipToken``;
- AML file system Get: ``{id, name, properties: {hsm: {settings, archiveStatus: [{filesystemPath, status:
  {state, lastStartedTime, lastCompletionTime, percentComplete, errorCode, errorMessage}}]}}}``; archive:
  POST answering 200 with no body.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SUBSCRIPTION = "00000000-1111-2222-3333-444444444444"


@dataclass
class FakeArm:
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # lower-case name -> body
    pages: list[dict[str, Any]] = field(default_factory=list)  # Resource Graph answers, in order
    filesystem: dict[str, Any] | None = None
    statuses: list[dict[str, Any]] = field(
        default_factory=list
    )  # archive statuses, one per GET after the POST
    calls: list[tuple[str, str, dict[str, Any] | None]] = field(default_factory=list)
    fail: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)  # url fragment -> answer

    def __call__(self, method: str, url: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        self.calls.append((method, url, body))
        for fragment, answer in self.fail.items():
            if fragment in url:
                return answer
        if "Microsoft.ResourceGraph" in url:
            skip = ((body or {}).get("options") or {}).get("$skipToken")
            index = 0 if skip is None else int(skip.removeprefix("page"))
            return 200, self.pages[index]
        if "/resourcegroups/" in url.lower() and "providers" not in url:
            name = url.split("/resourcegroups/")[1].split("?")[0].lower()
            if name in self.groups:
                return 200, self.groups[name]
            return 404, {
                "error": {
                    "code": "ResourceGroupNotFound",
                    "message": f"Resource group '{name}' could not be found.",
                }
            }
        if "amlFilesystems" in url:
            if self.filesystem is None:
                return 404, {"error": {"code": "ResourceNotFound", "message": "not found"}}
            if method == "POST":
                return 200, {}
            posted = any(m == "POST" for m, _, _ in self.calls)
            if posted and self.statuses:
                status = self.statuses.pop(0)
                self.filesystem["properties"]["hsm"]["archiveStatus"] = [
                    {"filesystemPath": "/", "status": status}
                ]
            return 200, self.filesystem
        raise AssertionError(f"unexpected call {method} {url}")


def graph_page(rows: list[dict[str, Any]], total: int, skip: str | None = None) -> dict[str, Any]:
    page: dict[str, Any] = {
        "totalRecords": total,
        "count": len(rows),
        "resultTruncated": "false",
        "data": rows,
        "facets": [],
    }
    if skip:
        page["$skipToken"] = skip
    return page


def row(
    name: str, group: str, type_: str = "microsoft.compute/virtualmachines", state: str = "Succeeded"
) -> dict[str, Any]:
    provider = type_.split("/")[0]
    kind = type_.split("/", 1)[1]
    return {
        "id": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{group}/providers/{provider}/{kind}/{name}",
        "type": type_,
        "location": "eastus",
        "resourceGroup": group,
        "state": state,
    }
