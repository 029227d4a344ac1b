"""Hex colours, payment card numbers and password strength."""

import string


def parse_hex_color(text: str) -> tuple[int, int, int]:
    """'#ff8800' or '#f80' -> (255, 136, 0); the '#' is required, case is ignored."""
    text = text.strip()
    if not text.startswith("#"):
        raise ValueError(f"colour must start with '#': {text!r}")
    digits = text[1:]
    if len(digits) == 3:
        digits = "".join(ch * 2 for ch in digits)
    elif len(digits) != 6:
        raise ValueError(f"colour needs 3 or 6 hex digits: {text!r}")
    if any(ch not in string.hexdigits for ch in digits):
        raise ValueError(f"bad hex digit in {text!r}")
    red, green, blue = (int(digits[i:i + 2], 16) for i in (0, 2, 4))
    return red, green, blue


def format_hex_color(red: int, green: int, blue: int, short: bool = False) -> str:
    """(255, 136, 0) -> '#ff8800', or '#f80' with `short` when every channel has a doubled digit."""
    for channel in (red, green, blue):
        if not 0 <= channel <= 255:
            raise ValueError(f"colour channel out of range 0..255: {channel}")
    digits = f"{red:02x}{green:02x}{blue:02x}"
    if short and all(digits[i] == digits[i + 1] for i in (0, 2, 4)):
        return "#" + digits[::2]
    return "#" + digits


def mask_card(number: str, visible: int = 4, mask_char: str = "*") -> str:
    """Hide all but the last `visible` digits, grouped in fours from the right: '4111111111111111' -> '**** **** **** 1111'.

    A number no longer than `visible` is masked entirely.
    """
    if visible < 0:
        raise ValueError(f"visible must be >= 0: {visible}")
    digits = "".join(ch for ch in number if ch in string.digits)
    if len(digits) <= visible:
        return mask_char * len(digits)
    hidden = len(digits) - visible
    masked = mask_char * hidden + digits[hidden:]
    groups = []
    end = len(masked)
    while end > 0:
        groups.append(masked[max(end - 4, 0):end])
        end -= 4
    return " ".join(reversed(groups))


def card_brand(number: str) -> str | None:
    """'visa', 'mastercard' or 'amex' from the prefix and length (spaces, dashes ignored); None when unknown."""
    digits = number.replace(" ", "").replace("-", "")
    if not (digits.isascii() and digits.isdigit()):
        return None
    length = len(digits)
    if digits[0] == "4" and length in (13, 16):
        return "visa"
    if digits[:2] in ("34", "37") and length == 15:
        return "amex"
    if length == 16 and 51 <= int(digits[:2]) <= 55:
        return "mastercard"
    return None


def password_score(password: str) -> int:
    """0 to 5: a point at lengths 8 and 12, plus one per character class (lower, upper, digit, other) past the first.

    Fewer than two distinct characters ('' or 'aaaaaaaa') scores 0.
    """
    if len(set(password)) < 2:
        return 0
    score = 0
    for threshold in (8, 12):
        if len(password) >= threshold:
            score += 1
    classes = [
        any(ch.islower() for ch in password),
        any(ch.isupper() for ch in password),
        any(ch.isdigit() for ch in password),
        any(not (ch.islower() or ch.isupper() or ch.isdigit()) for ch in password),
    ]
    return score + sum(classes) - 1
