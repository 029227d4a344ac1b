"""Check digits and checksums: Luhn, ISBN-10/13, EAN-13, IBAN, plus base-36 numbers."""

_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def luhn_check_digit(payload: str) -> int:
    """The Luhn digit to append to `payload`: '7992739871' -> 3."""
    if not (payload.isascii() and payload.isdigit()):
        raise ValueError(f"not a digit string: {payload!r}")
    total = 0
    for i, ch in enumerate(reversed(payload)):
        digit = int(ch)
        if i % 2 == 0:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return (10 - total % 10) % 10


def luhn_valid(number: str) -> bool:
    """True if `number` (spaces and dashes allowed) passes the Luhn check; needs at least 2 digits."""
    digits = number.replace(" ", "").replace("-", "")
    if len(digits) < 2 or not (digits.isascii() and digits.isdigit()):
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        digit = int(ch)
        if i % 2 == 1:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def isbn10_valid(text: str) -> bool:
    """ISBN-10 check ('0-306-40615-2'); the last character may be 'X' for ten."""
    chars = text.replace("-", "").replace(" ", "").upper()
    if len(chars) != 10 or not chars.isascii():
        return False
    head, last = chars[:9], chars[9]
    if not head.isdigit() or not (last.isdigit() or last == "X"):
        return False
    total = sum((10 - i) * int(ch) for i, ch in enumerate(head))
    total += 10 if last == "X" else int(last)
    return total % 11 == 0


def isbn13_valid(text: str) -> bool:
    """ISBN-13 check ('978-0-306-40615-7'): 13 digits, prefix 978 or 979, weights 1 and 3."""
    digits = text.replace("-", "").replace(" ", "")
    if len(digits) != 13 or not (digits.isascii() and digits.isdigit()):
        return False
    if digits[:3] not in ("978", "979"):
        return False
    total = 0
    for i, ch in enumerate(digits):
        total += int(ch) * (3 if i % 2 else 1)
    return total % 10 == 0


def ean13_check_digit(payload: str) -> int:
    """The 13th digit of an EAN-13 barcode from its first 12: '400638133393' -> 1."""
    if len(payload) != 12 or not (payload.isascii() and payload.isdigit()):
        raise ValueError(f"EAN-13 payload must be 12 digits: {payload!r}")
    odd = sum(int(ch) for ch in payload[0::2])
    even = sum(int(ch) for ch in payload[1::2])
    return (10 - (odd + 3 * even) % 10) % 10


def iban_valid(text: str) -> bool:
    """IBAN mod-97 check ('GB82 WEST 1234 5698 7654 32'); spaces ignored, 15 to 34 characters."""
    code = text.replace(" ", "")
    if not 15 <= len(code) <= 34 or not code.isascii() or not code.isalnum():
        return False
    if not code[:2].isalpha() or not code[2:4].isdigit():
        return False
    rearranged = code[4:] + code[:4]
    number = "".join(str(_BASE36.index(ch.lower())) for ch in rearranged)
    return int(number) % 97 == 1


def base36_encode(value: int, width: int = 1) -> str:
    """Non-negative int to lowercase base 36, left-padded with zeros to `width`: 1295 -> 'zz'."""
    if value < 0:
        raise ValueError(f"cannot encode a negative number: {value}")
    out = []
    while value > 0:
        value, rem = divmod(value, 36)
        out.append(_BASE36[rem])
    while len(out) < width:
        out.append("0")
    return "".join(reversed(out))


def base36_decode(text: str) -> int:
    """Base-36 text (either case) to int: 'ZZ' -> 1295; empty or foreign characters raise."""
    if not text:
        raise ValueError("empty base-36 string")
    value = 0
    for ch in text.lower():
        index = _BASE36.find(ch)
        if index < 0:
            raise ValueError(f"bad base-36 digit {ch!r} in {text!r}")
        value = value * 36 + index
    return value
