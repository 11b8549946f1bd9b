"""Reads deploy/kubernetes/*.yaml and prints, as JSON, what tests/it/deploy.rs
checks against probity's configuration: each probity container's probes,
ports, preStop pause, the pod's grace period and where its admin token comes
from, each Service's target ports, and the ConfigMap's probity.toml."""
import glob
import json
import os
import sys

import yaml

root = sys.argv[1]
facts = {"pods": [], "config": None, "services": []}
for path in sorted(glob.glob(os.path.join(root, "deploy/kubernetes/*.yaml"))):
    for doc in yaml.safe_load_all(open(path)):
        kind = doc.get("kind")
        if kind == "ConfigMap" and doc["metadata"]["name"] == "probity":
            facts["config"] = doc["data"]["probity.toml"]
        if kind == "Service":
            facts["services"].append({
                "name": doc["metadata"]["name"],
                "target_ports": [p.get("targetPort", p["port"]) for p in doc["spec"]["ports"]],
            })
        if kind != "Deployment":
            continue
        spec = doc["spec"]["template"]["spec"]
        probity = [c for c in spec.get("containers", []) + spec.get("initContainers", [])
                   if c["name"] == "probity"]
        for c in probity:
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            probe = lambda name: {"path": c[name]["httpGet"]["path"],
                                  "port": ports.get(c[name]["httpGet"]["port"])} if name in c else None
            facts["pods"].append({
                "file": os.path.basename(path),
                "grace": spec.get("terminationGracePeriodSeconds", 30),
                "pre_stop": c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0),
                "ports": ports,
                "readiness": probe("readinessProbe"),
                "liveness": probe("livenessProbe"),
                "config_env": next((e["value"] for e in c.get("env", []) if e["name"] == "PROBITY_CONFIG"), None),
                "admin_token": next((e.get("valueFrom", {"value": e.get("value")})
                                     for e in c.get("env", []) if e["name"] == "PROBITY_ADMIN_TOKEN"), None),
                "mount": next((m["mountPath"] for m in c.get("volumeMounts", []) if m["name"] == "config"), None),
            })
print(json.dumps(facts))
