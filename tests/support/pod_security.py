"""The Pod Security Standard "restricted" checks a pod spec must pass (what the API server's
PodSecurity admission enforces with ``pod-security.kubernetes.io/enforce=restricted``)."""

from __future__ import annotations

from typing import Any


def restricted_violations(pod_spec: dict[str, Any]) -> list[str]:
    """Why ``pod_spec`` would be refused under "restricted" (empty when it passes)."""
    problems: list[str] = []
    pod_context = pod_spec.get("securityContext") or {}
    pod_seccomp = (pod_context.get("seccompProfile") or {}).get("type")
    for container in [*pod_spec.get("initContainers", []), *pod_spec["containers"]]:
        name = container["name"]
        context = container.get("securityContext") or {}
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation != false")
        if context.get("privileged"):
            problems.append(f"{name}: privileged")
        if (context.get("capabilities") or {}).get("drop") != ["ALL"]:
            problems.append(f"{name}: capabilities.drop != [ALL]")
        if set((context.get("capabilities") or {}).get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: capabilities added")
        if not (context.get("runAsNonRoot") or pod_context.get("runAsNonRoot")):
            problems.append(f"{name}: runAsNonRoot not set")
        if (context.get("runAsUser", pod_context.get("runAsUser")) or 1) == 0:
            problems.append(f"{name}: runAsUser 0")
        seccomp = (context.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in {"RuntimeDefault", "Localhost"}:
            problems.append(f"{name}: seccompProfile {seccomp!r}")
    if pod_spec.get("hostNetwork") or pod_spec.get("hostPID") or pod_spec.get("hostIPC"):
        problems.append("host namespaces")
    problems.extend(
        f"volume {volume['name']}: hostPath"
        for volume in pod_spec.get("volumes") or []
        if "hostPath" in volume
    )
    return problems
