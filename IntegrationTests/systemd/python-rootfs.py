# Run by the product sandbox image's own python3 (as root, in a container of that image):
# writes to stdout a tar of a root holding only python3 and what it loads (the packages
# below, without their docs, locales or gconv modules), for a guest whose container engine
# must load the image and copy it into every container under TCG. Paths through the
# merged-/usr symlinks (/lib -> usr/lib) are stored under their real directory, the
# top-level symlinks as symlinks.
import os
import subprocess
import sys
import tarfile

PACKAGES = ["python3-minimal", "python3.11-minimal", "libpython3.11-minimal", "libc6", "zlib1g", "libexpat1"]
listed = subprocess.run(["dpkg", "-L", *PACKAGES], check=True, capture_output=True, text=True).stdout.split("\n")
wanted = [p for p in listed + ["/etc/ld.so.cache", "/tmp"]
          if p.startswith("/") and p != "/." and not p.startswith("/usr/share/") and "/gconv/" not in p]

members = {}
def add(path):
    name = path.lstrip("/")
    if not name or name in members:
        return
    parent = os.path.dirname(path)
    if parent != "/":
        add(parent)
    members[name] = path

for top in os.listdir("/"):
    if os.path.islink("/" + top):
        add("/" + top)
for path in wanted:
    if os.path.lexists(path):
        add(os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path)))

with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as archive:
    for name in sorted(members):
        archive.add(members[name], arcname=name, recursive=False)
