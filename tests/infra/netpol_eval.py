"""Which connections a set of Kubernetes NetworkPolicies lets in (ingress only), as the API
documents it: a pod no Ingress policy selects accepts everything; a selected pod accepts a
connection only if some selecting policy has a rule whose peers and ports match."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    namespace_labels: dict[str, str] = field(default_factory=dict)


def selects(selector: dict | None, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions); {} selects everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        present = key in labels
        ok = {
            "In": present and labels.get(key) in (values or []),
            "NotIn": not present or labels.get(key) not in (values or []),
            "Exists": present,
            "DoesNotExist": not present,
        }[operator]
        if not ok:
            return False
    return True


def _peer_matches(peer: dict, source: Pod, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        return False  # pod-to-pod traffic here; no policy of ours uses ipBlock
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], source.namespace_labels):
            return False
    elif source.namespace != policy_namespace:
        return False
    return "podSelector" not in peer or selects(peer["podSelector"], source.labels)


def _port_matches(rule_ports: list[dict] | None, port: int, protocol: str) -> bool:
    if not rule_ports:
        return True
    for entry in rule_ports:
        if entry.get("protocol", "TCP") != protocol:
            continue
        start = entry.get("port")
        if start is None:
            return True
        # Pulumi's mocks hand numbers back as floats.
        if isinstance(start, int | float) and start <= port <= entry.get("endPort", start):
            return True
    return False


def ingress_allowed(
    policies: list[dict], source: Pod, target: Pod, port: int, protocol: str = "TCP"
) -> bool:
    selecting = [
        p
        for p in policies
        if p["metadata"].get("namespace") == target.namespace
        and "Ingress" in (p["spec"].get("policyTypes") or ["Ingress"])
        and selects(p["spec"].get("podSelector"), target.labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from")
            peer_ok = not peers or any(
                _peer_matches(peer, source, policy["metadata"]["namespace"]) for peer in peers
            )
            if peer_ok and _port_matches(rule.get("ports"), port, protocol):
                return True
    return False
