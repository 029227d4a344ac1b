"""Roman numerals between 1 and 3999."""

SYMBOLS = [
    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
    (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
]
MAX_VALUE = 3999


def to_roman(number):
    """The Roman numeral of ``number`` (1..3999)."""
    if not 1 <= number <= MAX_VALUE:
        raise ValueError(f"{number} is out of range 1..{MAX_VALUE}")
    parts = []
    for value, symbol in SYMBOLS:
        while number >= value:
            parts.append(symbol)
            number -= value
    return "".join(parts)


def from_roman(text):
    """The value of a Roman numeral (upper or lower case)."""
    text = text.upper()
    values = {symbol: value for value, symbol in SYMBOLS if len(symbol) == 1}
    total = 0
    for i, char in enumerate(text):
        if char not in values:
            raise ValueError(f"{char!r} is not a Roman digit")
        value = values[char]
        if i + 1 < len(text) and values.get(text[i + 1], 0) > value:
            total -= value
        else:
            total += value
    return total
