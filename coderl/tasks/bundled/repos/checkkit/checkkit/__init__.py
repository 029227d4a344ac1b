"""checkkit: parse and validate identifiers and codes."""

from checkkit.codes import card_brand, format_hex_color, mask_card, parse_hex_color, password_score
from checkkit.digits import (
    base36_decode, base36_encode, ean13_check_digit, iban_valid, isbn10_valid, isbn13_valid, luhn_check_digit,
    luhn_valid,
)
from checkkit.network import cidr_contains, format_ipv4, is_private_ipv4, is_valid_email, netmask_from_prefix, parse_ipv4
from checkkit.versions import bump_version, compare_prerelease, compare_versions, parse_version

__all__ = [
    "base36_decode", "base36_encode", "bump_version", "card_brand", "cidr_contains", "compare_prerelease",
    "compare_versions", "ean13_check_digit", "format_hex_color", "format_ipv4", "iban_valid", "is_private_ipv4",
    "is_valid_email", "isbn10_valid", "isbn13_valid", "luhn_check_digit", "luhn_valid", "mask_card",
    "netmask_from_prefix", "parse_hex_color", "parse_ipv4", "parse_version", "password_score",
]
