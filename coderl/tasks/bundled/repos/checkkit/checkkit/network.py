"""IPv4 addresses, netmasks and CIDR blocks (plain integer arithmetic), and email addresses."""

# RFC 1918 private blocks as (first address, prefix length).
_PRIVATE_BLOCKS = [(0x0A000000, 8), (0xAC100000, 12), (0xC0A80000, 16)]


def parse_ipv4(text: str) -> int:
    """Dotted quad to a 32-bit int: '192.168.0.1' -> 3232235521; rejects leading zeros and octets > 255."""
    parts = text.split(".")
    if len(parts) != 4:
        raise ValueError(f"not an IPv4 address: {text!r}")
    value = 0
    for part in parts:
        if not (part.isascii() and part.isdigit()):
            raise ValueError(f"bad octet {part!r} in {text!r}")
        if len(part) > 1 and part[0] == "0":
            raise ValueError(f"leading zero in octet {part!r} of {text!r}")
        octet = int(part)
        if octet > 255:
            raise ValueError(f"octet {octet} out of range in {text!r}")
        value = (value << 8) | octet
    return value


def format_ipv4(value: int) -> str:
    """A 32-bit int to a dotted quad: 3232235521 -> '192.168.0.1'."""
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"not a 32-bit address: {value}")
    octets = []
    for shift in (24, 16, 8, 0):
        octets.append(str((value >> shift) & 0xFF))
    return ".".join(octets)


def netmask_from_prefix(prefix: int) -> str:
    """Prefix length to a dotted netmask: 24 -> '255.255.255.0', 0 -> '0.0.0.0'."""
    if not 0 <= prefix <= 32:
        raise ValueError(f"prefix length must be 0..32: {prefix}")
    mask = (0xFFFFFFFF << (32 - prefix)) & 0xFFFFFFFF
    octets = []
    for _ in range(4):
        octets.append(str(mask & 0xFF))
        mask >>= 8
    return ".".join(reversed(octets))


def cidr_contains(cidr: str, address: str) -> bool:
    """True if `address` lies in the block `cidr` ('10.0.0.0/8'); host bits of the network are ignored."""
    network, _, prefix_text = cidr.partition("/")
    if not (prefix_text.isascii() and prefix_text.isdigit()):
        raise ValueError(f"not a CIDR block: {cidr!r}")
    prefix = int(prefix_text)
    if prefix > 32:
        raise ValueError(f"prefix length must be 0..32: {cidr!r}")
    mask = (0xFFFFFFFF << (32 - prefix)) & 0xFFFFFFFF
    return (parse_ipv4(network) & mask) == (parse_ipv4(address) & mask)


def is_private_ipv4(address: str) -> bool:
    """True for addresses in 10.0.0.0/8, 172.16.0.0/12 and 192.168.0.0/16."""
    value = parse_ipv4(address)
    for start, prefix in _PRIVATE_BLOCKS:
        shift = 32 - prefix
        if value >> shift == start >> shift:
            return True
    return False


def is_valid_email(text: str, max_local: int = 64) -> bool:
    """A simple shape check: one '@', no spaces, local part of 1 to `max_local` characters, dotted domain."""
    if text.count("@") != 1 or any(ch.isspace() for ch in text):
        return False
    local, domain = text.split("@")
    if not local or len(local) > max_local or "." not in domain:
        return False
    for part in (local, domain):
        if part.startswith(".") or part.endswith(".") or ".." in part:
            return False
    tld = domain[domain.rindex(".") + 1:]
    return len(tld) >= 2 and tld.isalpha()
