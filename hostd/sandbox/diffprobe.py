# The guest side of a sandbox diff (diffguest.go): hostd writes a JSON
# request to a file under /run and runs this with python3. It answers one
# JSON line per entry, sorted by the path's bytes, then {"end":..}.
# Paths travel base64 (names need not be UTF-8).
#
# Request: {"mode": "walk"|"stat",
#   walk: "roots": [b64], "excludes": [b64], "since": float (0: every entry),
#         "after": b64 (cursor, exclusive), "limit": N,
#         "lists": [b64] (directories whose children are listed too),
#         "dirs_only": only the changed directories, without digests
#   stat: "paths": [b64]}
# walk lists the entries under roots on the roots' filesystem whose ctime or
# mtime is after since, and every child of such a directory (a removal shows
# only there); since 0 lists everything. Regular files get a sha256.
import base64, hashlib, json, os, stat, sys

def b64(b):
    return base64.b64encode(b).decode()

def unb(s):
    return base64.b64decode(s)

def record(p, st):
    m = st.st_mode
    r = {"p": b64(p), "m": stat.S_IMODE(m), "u": st.st_uid, "g": st.st_gid,
         "s": st.st_size, "mt": st.st_mtime}
    if stat.S_ISREG(m):
        r["t"] = "f"
        h = hashlib.sha256()
        try:
            with open(p, "rb") as f:
                while True:
                    c = f.read(1 << 20)
                    if not c:
                        break
                    h.update(c)
            r["h"] = h.hexdigest()
        except OSError as e:
            r["e"] = e.strerror or "unreadable"
    elif stat.S_ISDIR(m):
        r["t"] = "d"
        r["s"] = 0
    elif stat.S_ISLNK(m):
        r["t"] = "l"
        try:
            r["l"] = b64(os.readlink(p))
        except OSError:
            pass
    else:
        r["t"] = "o"
    return r

def excluded(p, ex):
    for e in ex:
        if p == e or p.startswith(e.rstrip(b"/") + b"/"):
            return True
    return False

def walk(req):
    ex = [unb(e) for e in req.get("excludes", [])]
    since = float(req.get("since", 0))
    after = unb(req["after"]) if req.get("after") else None
    limit = int(req.get("limit", 1000))
    lists = set(unb(x) for x in req.get("lists", []))
    dirs_only = bool(req.get("dirs_only"))
    found = {}
    for root in [unb(r) for r in req["roots"]]:
        try:
            rst = os.lstat(root)
        except OSError:
            continue
        if excluded(root, ex):
            continue
        rmine = since == 0 or max(rst.st_ctime, rst.st_mtime) > since
        if not dirs_only or (rmine and stat.S_ISDIR(rst.st_mode)):
            found[root] = rst
        if not stat.S_ISDIR(rst.st_mode):
            continue
        dev = rst.st_dev
        stack = [(root, (rmine or root in lists) and not dirs_only)]
        while stack:
            d, changed = stack.pop()
            try:
                it = os.scandir(d)
            except OSError:
                continue
            with it:
                for e in it:
                    p = e.path if d != b"/" else b"/" + e.name
                    if excluded(p, ex):
                        continue
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    mine = since == 0 or max(st.st_ctime, st.st_mtime) > since
                    isdir = stat.S_ISDIR(st.st_mode)
                    if dirs_only:
                        if mine and isdir:
                            found[p] = st
                    elif mine or changed:
                        found[p] = st
                    if isdir and st.st_dev == dev:
                        stack.append((p, (mine or p in lists) and not dirs_only))
    keys = sorted(k for k in found if after is None or k > after)
    more = len(keys) > limit
    out = sys.stdout
    for k in keys[:limit]:
        if dirs_only:
            out.write(json.dumps({"p": b64(k), "t": "d"}) + "\n")
        else:
            out.write(json.dumps(record(k, found[k])) + "\n")
    out.write(json.dumps({"end": True, "more": more, "total": len(keys)}) + "\n")

def stat_paths(req):
    out = sys.stdout
    for p in sorted(unb(x) for x in req["paths"]):
        try:
            st = os.lstat(p)
        except OSError:
            out.write(json.dumps({"p": b64(p), "x": True}) + "\n")
            continue
        out.write(json.dumps(record(p, st)) + "\n")
    out.write(json.dumps({"end": True}) + "\n")

def main():
    path = sys.argv[1]
    with open(path, "rb") as f:
        req = json.load(f)
    os.unlink(path)
    if req["mode"] == "walk":
        walk(req)
    else:
        stat_paths(req)

main()
