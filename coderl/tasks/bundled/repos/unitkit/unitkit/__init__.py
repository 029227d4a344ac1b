"""unitkit: units, money in cents and human-readable formatting."""

from unitkit.human import format_bitrate, format_hms, format_thousands, transfer_seconds
from unitkit.measures import average_speed, bmi, bmi_category, convert_length, convert_temperature, to_feet_inches
from unitkit.money import (
    allocate_cents, amortization_schedule, apply_discount, compound_amount, format_money, loan_payment,
    parse_money, progressive_tax, split_cents,
)
from unitkit.scaling import percent_change, rescale, round_to_step

__all__ = [
    "allocate_cents", "amortization_schedule", "apply_discount", "average_speed", "bmi", "bmi_category",
    "compound_amount", "convert_length", "convert_temperature", "format_bitrate", "format_hms", "format_money",
    "format_thousands", "loan_payment", "parse_money", "percent_change", "progressive_tax", "rescale",
    "round_to_step", "split_cents", "to_feet_inches", "transfer_seconds",
]
