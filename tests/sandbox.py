"""Run a command as the container image runs it: ``python -m tests.sandbox --writable DIR -- CMD``.

Meant to run inside ``unshare --user --map-root-user --mount --net`` (see :data:`SANDBOX`): in
that new mount namespace it binds each ``--writable`` folder onto itself, remounts every other
file system read-only (the root, /dev/shm, anything mounted below; not /proc, /sys or the device
nodes), then execs CMD. The network namespace has no interface up, not even loopback: any
connection fails. That is ``docker run --read-only --network none -v VOLUME:/index``: a
read-only root file system, the index on a volume, no network.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

SANDBOX = ("unshare", "--user", "--map-root-user", "--mount", "--net", "--")
KEPT = {"proc", "sysfs", "devtmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "securityfs"}


def mounts() -> list[tuple[str, str, str]]:
    """(mount point, options, file system type) of each mount, as /proc/self/mountinfo says."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            fields, _, tail = line.partition(" - ")
            parts = fields.split()
            point = parts[4].encode("latin-1").decode("unicode_escape")
            found.append((point, parts[5], tail.split()[0]))
    return found


def mount(*args: str) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"sandbox: mount {' '.join(args)}: {result.stderr.strip()}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writable", action="append", default=[])
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    writable = [os.path.realpath(folder) for folder in args.writable]
    mount("--make-rprivate", "/")
    for folder in writable:
        mount("--bind", folder, folder)
    for point, options, kind in mounts():
        if point in writable or kind in KEPT or "rw" not in options.split(","):
            continue
        mount("-o", "remount,bind,ro", point)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
