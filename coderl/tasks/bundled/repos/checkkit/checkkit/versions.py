"""Semantic versions: 'major.minor.patch' with an optional '-prerelease'."""


def parse_version(text: str) -> tuple[int, int, int, str | None]:
    """'v1.2.3-rc.1' -> (1, 2, 3, 'rc.1'); '1.2.3' -> (1, 2, 3, None). Leading zeros are rejected."""
    text = text.strip()
    if text[:1] in ("v", "V"):
        text = text[1:]
    core, sep, pre = text.partition("-")
    if sep and not pre:
        raise ValueError(f"empty prerelease in {text!r}")
    parts = core.split(".")
    if len(parts) != 3:
        raise ValueError(f"expected major.minor.patch: {text!r}")
    for part in parts:
        if not (part.isascii() and part.isdigit()) or (len(part) > 1 and part[0] == "0"):
            raise ValueError(f"bad version number {part!r} in {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2]), pre or None


def compare_prerelease(a: str, b: str) -> int:
    """Order prerelease tags by dot-separated fields: numbers numerically and below words; 'rc.2' < 'rc.10'."""
    keys = []
    for tag in (a, b):
        fields = tag.split(".")
        keys.append([(0, int(f), "") if f.isdigit() else (1, 0, f) for f in fields])
    left, right = keys
    if left == right:
        return 0
    return -1 if left < right else 1


def compare_versions(a: str, b: str) -> int:
    """-1, 0 or 1 as version `a` is older than, equal to, or newer than `b`; '1.0.0-rc.1' < '1.0.0'."""
    va, vb = parse_version(a), parse_version(b)
    if va[:3] != vb[:3]:
        return -1 if va[:3] < vb[:3] else 1
    pre_a, pre_b = va[3], vb[3]
    if pre_a == pre_b:
        return 0
    if pre_a is None:
        return 1
    if pre_b is None:
        return -1
    return compare_prerelease(pre_a, pre_b)


def bump_version(text: str, part: str = "patch") -> str:
    """Bump 'major', 'minor' or 'patch', zeroing the parts below; a prerelease bumped at 'patch' is released."""
    major, minor, patch, pre = parse_version(text)
    if part == "major":
        return f"{major + 1}.0.0"
    if part == "minor":
        return f"{major}.{minor + 1}.0"
    if part != "patch":
        raise ValueError(f"unknown version part {part!r}")
    if pre is not None:
        return f"{major}.{minor}.{patch}"
    return f"{major}.{minor}.{patch + 1}"
