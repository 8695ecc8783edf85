# Run by the product sandbox image's own python3, as root in a container of that image,
# which is then exported: removes every file but python3 and what it loads (the packages
# below, without their docs, locales or gconv modules), for a guest whose container engine
# copies the image into every container under TCG. What is kept is named through the
# merged-/usr symlinks (/lib -> usr/lib), so both spellings are kept.
import os
import shutil
import subprocess

PACKAGES = ["python3-minimal", "python3.11-minimal", "libpython3.11-minimal", "libc6", "zlib1g", "libexpat1"]
listed = subprocess.run(["dpkg", "-L", *PACKAGES], check=True, capture_output=True, text=True).stdout.split("\n")
keep = set()
for path in listed + ["/etc/ld.so.cache", "/etc/passwd", "/etc/group"]:
    if path.startswith("/") and path != "/." and not path.startswith("/usr/share/") and "/gconv/" not in path:
        keep.add(path)
        keep.add(os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path)))
# A directory stays when anything under it stays.
for path in list(keep):
    while path not in ("/", ""):
        path = os.path.dirname(path)
        keep.add(path)
        keep.add(os.path.realpath(path))

for top in os.listdir("/"):
    root = "/" + top
    if top in ("proc", "sys", "dev", "tmp", "run") or os.path.islink(root):
        continue
    for directory, dirs, files in os.walk(root, topdown=False):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            path = os.path.join(directory, name)
            if path not in keep:
                try:
                    os.unlink(path)
                except OSError:  # the engine's own bind mounts (/etc/hosts, /etc/hostname)
                    pass
        for name in dirs:
            path = os.path.join(directory, name)
            if os.path.isdir(path) and not os.path.islink(path) and path not in keep and not os.listdir(path):
                os.rmdir(path)
    if root not in keep and os.path.isdir(root) and not os.listdir(root):
        shutil.rmtree(root)
