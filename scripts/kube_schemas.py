#!/usr/bin/env python3
"""Kubernetes JSON schemas for kubeconform, from the kubernetes-validate wheel (PyPI).

    kube_schemas.py WHEEL OUT VERSION...

kubernetes-validate carries the API's schemas per Kubernetes version
(kubernetes_validate/kubernetes-json-schema/v1.37.0-local-strict/job-batch-v1.json, ...), each
kind referring to the version's shared `_definitions.json` by an absolute URI
("/api/_definitions.json#/$defs/..."). kubeconform reads schemas from a local folder with
`-schema-location 'OUT/{{ .NormalizedKubernetesVersion }}-local{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json'`,
and resolves references relative to each file: so each schema is written to
OUT/v<VERSION>-local[-strict]/ with its `$id` dropped and its references made relative
("_definitions.json#/$defs/..."). Nothing is fetched: the wheel holds every file.
"""
import json
import os
import sys
import zipfile

PREFIX = "kubernetes_validate/kubernetes-json-schema/"


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    wheel, out, versions = argv[1], argv[2], argv[3:]
    wanted = {f"v{v}-local{s}/" for v in versions for s in ("", "-strict")}
    written = {w: 0 for w in wanted}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if not name.startswith(PREFIX) or not name.endswith(".json"):
                continue
            rel = name[len(PREFIX):]
            folder = rel.split("/", 1)[0] + "/"
            if folder not in wanted:
                continue
            schema = json.loads(z.read(name))
            schema.pop("$id", None)
            text = json.dumps(schema).replace('"/api/_definitions.json#', '"_definitions.json#')
            path = os.path.join(out, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".tmp", "w") as f:
                f.write(text)
            os.replace(path + ".tmp", path)
            written[folder] += 1
    missing = [w for w, n in written.items() if n == 0]
    if missing:
        print(f"kube_schemas.py: {wheel} has no schemas for {', '.join(sorted(missing))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
