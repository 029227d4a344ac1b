"""Temperatures, lengths, speeds and body-mass index."""

import math
from fractions import Fraction

# Length of one unit in metres (exact international definitions).
_METRES = {
    "mm": Fraction(1, 1000), "cm": Fraction(1, 100), "m": Fraction(1), "km": Fraction(1000),
    "in": Fraction(254, 10000), "ft": Fraction(3048, 10000), "yd": Fraction(9144, 10000), "mi": Fraction(1609344, 1000),
}
# Factor from metres per second to each speed unit.
_SPEED = {"m/s": Fraction(1), "km/h": Fraction(36, 10), "mph": Fraction(3600) / _METRES["mi"]}
_ZERO_CELSIUS = Fraction(27315, 100)


def convert_temperature(value: float, from_unit: str, to_unit: str) -> float:
    """Convert between 'C', 'F' and 'K'; a temperature below absolute zero raises ValueError."""
    source, target = from_unit.upper(), to_unit.upper()
    if source not in ("C", "F", "K") or target not in ("C", "F", "K"):
        raise ValueError(f"unknown temperature unit in {from_unit!r} -> {to_unit!r}")
    v = Fraction(str(value))
    if source == "C":
        kelvin = v + _ZERO_CELSIUS
    elif source == "F":
        kelvin = (v - 32) * 5 / 9 + _ZERO_CELSIUS
    else:
        kelvin = v
    if kelvin < 0:
        raise ValueError(f"{value} {source} is below absolute zero")
    if target == "C":
        return float(kelvin - _ZERO_CELSIUS)
    if target == "F":
        return float((kelvin - _ZERO_CELSIUS) * 9 / 5 + 32)
    return float(kelvin)


def convert_length(value: float, from_unit: str, to_unit: str, digits: int | None = None) -> float:
    """Convert between mm, cm, m, km, in, ft, yd and mi, optionally rounded to ``digits``."""
    if from_unit not in _METRES:
        raise ValueError(f"unknown length unit {from_unit!r}")
    if to_unit not in _METRES:
        raise ValueError(f"unknown length unit {to_unit!r}")
    result = float(Fraction(str(value)) * _METRES[from_unit] / _METRES[to_unit])
    if digits is not None:
        return round(result, digits)
    return result


def to_feet_inches(metres: float) -> tuple[int, int]:
    """Whole feet and inches, inches rounded half up and carried into feet: 1.8 -> (5, 11), 1.8288 -> (6, 0)."""
    if metres < 0:
        raise ValueError("a height must not be negative")
    total = Fraction(str(metres)) / _METRES["in"]
    inches = math.floor(total + Fraction(1, 2))
    feet, inches = divmod(inches, 12)
    return feet, inches


def average_speed(distance_m: float, seconds: float, unit: str = "km/h", digits: int = 1) -> float:
    """Average speed in 'm/s', 'km/h' or 'mph' for ``distance_m`` metres covered in ``seconds``."""
    if seconds <= 0:
        raise ValueError("the time must be positive")
    if distance_m < 0:
        raise ValueError("the distance must not be negative")
    if unit not in _SPEED:
        raise ValueError(f"unknown speed unit {unit!r}")
    speed = Fraction(str(distance_m)) / Fraction(str(seconds)) * _SPEED[unit]
    return round(float(speed), digits)


def bmi(weight_kg: float, height_m: float, digits: int = 1) -> float:
    """Body-mass index, weight over height squared: bmi(70, 1.75) -> 22.9."""
    if weight_kg <= 0 or height_m <= 0:
        raise ValueError("weight and height must be positive")
    if height_m > 3:
        raise ValueError(f"height {height_m} looks like centimetres; pass metres")
    return round(weight_kg / (height_m * height_m), digits)


def bmi_category(value: float) -> str:
    """Adult bands: under 18.5 underweight, 18.5 up to 25 normal, 25 up to 30 overweight, 30 and over obese."""
    if value < 18.5:
        return "underweight"
    if value < 25:
        return "normal"
    if value < 30:
        return "overweight"
    return "obese"
