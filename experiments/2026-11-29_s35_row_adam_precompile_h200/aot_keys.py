"""AOTAutograd's cache keys in a start's stderr, written with
TORCH_LOGS="+torch._functorch._aot_autograd.autograd_cache": for every key computed (by any process: the
training process and its helpers share the stderr), the process, the frame, whether the graph is an optimizer
update's (adam: it has lerp; row_adam: index_select and exp), and the key's components with their hashes; then
each process's cache hits and misses. Two processes' keys for the same update differ in the components whose
hashes differ.

    python aot_keys.py start.err > keys.txt
    python aot_keys.py --diff keys.txt KEY_A KEY_B    # the components of two keys (of keys.txt) that differ
"""
import collections
import re
import sys

LINE = re.compile(r"^[VDIWE]\d{4} [\d:.]+\s+(\d+) (\S+)\] (?:\[[^\]]*\] )?(.*)$")
HEADER = "Autograd graph cache hash details for key "
COMPONENT = re.compile(r"^\[(\w+)\] ([^:]+): (.*)$")
RESULT = re.compile(r"AOTAutograd cache (hit|miss) for key (\S+)")


def blocks(lines):
    """(pid, key, lines of the record) for each key's record; and (pid, hit or miss, key) for each lookup."""
    open_blocks, done, lookups = {}, [], []
    for line in lines:
        match = LINE.match(line.rstrip("\n"))
        if not match:
            continue
        pid, where, text = match.groups()
        current = open_blocks.get(pid)
        if text.startswith(HEADER):
            if current:
                done.append(current)
            open_blocks[pid] = (pid, where, text[len(HEADER):].rstrip(":"), [])
            continue
        result = RESULT.search(text)
        if result:
            lookups.append((pid, result.group(1), result.group(2)))
        if current and where == current[1]:
            current[3].append(text)
        elif current:
            done.append(current)
            del open_blocks[pid]
    return done + list(open_blocks.values()), lookups


def kind(text):
    if "lerp" in text:
        return "adam"
    if "index_select" in text and "exp" in text:
        return "row_adam"
    return "other"


def main(path):
    with open(path, errors="replace") as file:
        found, lookups = blocks(file)
    for pid, _, key, lines in found:
        text = "\n".join(lines)
        what = kind(text)
        print(f"key pid={pid} {what} {key} components={sum(bool(COMPONENT.match(l)) for l in lines)}")
        if what != "other":
            for line in lines:
                component = COMPONENT.match(line)
                if component:
                    print(f"  {component.group(1)} {component.group(2)}: {component.group(3)[:300]}")
                elif line.strip() and not line.startswith("#"):
                    print(f"  | {line[:200]}")
    counts = collections.Counter((pid, result) for pid, result, _ in lookups)
    for (pid, result), n in sorted(counts.items()):
        print(f"lookups pid={pid} {result} {n}")
    for pid, result, key in lookups:
        print(f"lookup pid={pid} {result} {key}")


def components(path, key):
    """{component: (hash, value)} of the first record of `key` in keys.txt (main's output)."""
    found, inside = {}, False
    with open(path, errors="replace") as file:
        for line in file:
            if line.startswith("key "):
                if inside:
                    break
                inside = line.split()[3] == key
            elif inside and line.startswith("  ") and not line.startswith("  |"):
                digest, rest = line.strip().split(" ", 1)
                name, _, value = rest.partition(": ")
                found[name] = (digest, value)
    return found


def diff(path, key_a, key_b):
    a, b = components(path, key_a), components(path, key_b)
    for name in sorted(set(a) | set(b)):
        if a.get(name, ("",))[0] != b.get(name, ("",))[0]:
            print(f"{name}\n  A {a.get(name, ('-', '-'))[1][:300]}\n  B {b.get(name, ('-', '-'))[1][:300]}")


if __name__ == "__main__":
    if sys.argv[1] == "--diff":
        diff(*sys.argv[2:5])
    else:
        main(sys.argv[1])
