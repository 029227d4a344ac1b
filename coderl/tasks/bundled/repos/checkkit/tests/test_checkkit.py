import pytest

from checkkit import (
    base36_decode, base36_encode, bump_version, card_brand, cidr_contains, compare_prerelease, compare_versions,
    ean13_check_digit, format_hex_color, format_ipv4, iban_valid, is_private_ipv4, is_valid_email, isbn10_valid,
    isbn13_valid, luhn_check_digit, luhn_valid, mask_card, netmask_from_prefix, parse_hex_color, parse_ipv4,
    parse_version, password_score,
)


def test_luhn_check_digit():
    assert luhn_check_digit("7992739871") == 3
    assert luhn_check_digit("453914880343646") == 7
    assert luhn_check_digit("0") == 0
    assert luhn_check_digit("5") == 9
    with pytest.raises(ValueError):
        luhn_check_digit("")
    with pytest.raises(ValueError):
        luhn_check_digit("12a4")


def test_luhn_valid():
    assert luhn_valid("79927398713") is True
    assert luhn_valid("79927398710") is False
    assert luhn_valid("4539 1488-0343 6467") is True
    assert luhn_valid("59") is True
    assert luhn_valid("0") is False
    assert luhn_valid("7992739871a") is False


def test_isbn10_valid():
    assert isbn10_valid("0-306-40615-2") is True
    assert isbn10_valid("0306406153") is False
    assert isbn10_valid("080442957X") is True
    assert isbn10_valid("080442957x") is True
    assert isbn10_valid("030640615") is False
    assert isbn10_valid("X306406152") is False


def test_isbn13_valid():
    assert isbn13_valid("978-0-306-40615-7") is True
    assert isbn13_valid("9780306406158") is False
    assert isbn13_valid("9790000000001") is True
    assert isbn13_valid("9770306406150") is False
    assert isbn13_valid("978000000004") is False


def test_ean13_check_digit():
    assert ean13_check_digit("400638133393") == 1
    assert ean13_check_digit("978030640615") == 7
    assert ean13_check_digit("000000000000") == 0
    with pytest.raises(ValueError):
        ean13_check_digit("40063813339")
    with pytest.raises(ValueError):
        ean13_check_digit("40063813339a")


def test_iban_valid():
    assert iban_valid("GB82 WEST 1234 5698 7654 32") is True
    assert iban_valid("GB83 WEST 1234 5698 7654 32") is False
    assert iban_valid("NO9386011117947") is True
    assert iban_valid("GB16" + "A" * 30) is True
    assert iban_valid("GB33" + "A" * 31) is False
    assert iban_valid("G187WEST12345698765432") is False


def test_base36_encode():
    assert base36_encode(1295) == "zz"
    assert base36_encode(0) == "0"
    assert base36_encode(35) == "z"
    assert base36_encode(36) == "10"
    assert base36_encode(35, 3) == "00z"
    with pytest.raises(ValueError):
        base36_encode(-1)


def test_base36_decode():
    assert base36_decode("ZZ") == 1295
    assert base36_decode("10") == 36
    assert base36_decode("0") == 0
    assert base36_decode("a") == 10
    with pytest.raises(ValueError):
        base36_decode("")
    with pytest.raises(ValueError):
        base36_decode("z!")


def test_parse_ipv4():
    assert parse_ipv4("192.168.0.1") == 3232235521
    assert parse_ipv4("0.0.0.0") == 0
    assert parse_ipv4("255.255.255.255") == 4294967295
    with pytest.raises(ValueError):
        parse_ipv4("256.0.0.1")
    with pytest.raises(ValueError):
        parse_ipv4("01.2.3.4")
    with pytest.raises(ValueError):
        parse_ipv4("1.2.3")


def test_format_ipv4():
    assert format_ipv4(3232235521) == "192.168.0.1"
    assert format_ipv4(16909060) == "1.2.3.4"
    assert format_ipv4(0) == "0.0.0.0"
    assert format_ipv4(4294967295) == "255.255.255.255"
    with pytest.raises(ValueError):
        format_ipv4(4294967296)
    with pytest.raises(ValueError):
        format_ipv4(-1)


def test_netmask_from_prefix():
    assert netmask_from_prefix(24) == "255.255.255.0"
    assert netmask_from_prefix(20) == "255.255.240.0"
    assert netmask_from_prefix(0) == "0.0.0.0"
    assert netmask_from_prefix(32) == "255.255.255.255"
    with pytest.raises(ValueError):
        netmask_from_prefix(33)
    with pytest.raises(ValueError):
        netmask_from_prefix(-1)


def test_cidr_contains():
    assert cidr_contains("10.0.0.0/8", "10.20.30.40") is True
    assert cidr_contains("10.0.0.0/8", "11.0.0.0") is False
    assert cidr_contains("192.168.1.0/24", "192.168.1.255") is True
    assert cidr_contains("192.168.1.0/24", "192.168.0.255") is False
    assert cidr_contains("1.2.3.4/32", "1.2.3.5") is False
    with pytest.raises(ValueError):
        cidr_contains("10.0.0.0", "10.0.0.1")


def test_is_private_ipv4():
    assert is_private_ipv4("10.255.255.255") is True
    assert is_private_ipv4("172.31.255.255") is True
    assert is_private_ipv4("172.32.0.0") is False
    assert is_private_ipv4("172.15.255.255") is False
    assert is_private_ipv4("192.168.0.0") is True
    assert is_private_ipv4("8.8.8.8") is False


def test_is_valid_email():
    assert is_valid_email("first.last@mail.example.com") is True
    assert is_valid_email("a@b.co") is True
    assert is_valid_email("user@example.c") is False
    assert is_valid_email("user..name@example.com") is False
    assert is_valid_email("x" * 65 + "@example.com") is False
    assert is_valid_email("john doe@example.com") is False


def test_parse_version():
    assert parse_version("1.2.3") == (1, 2, 3, None)
    assert parse_version("v10.0.1-rc.1") == (10, 0, 1, "rc.1")
    assert parse_version("0.0.0") == (0, 0, 0, None)
    with pytest.raises(ValueError):
        parse_version("1.2")
    with pytest.raises(ValueError):
        parse_version("01.2.3")
    with pytest.raises(ValueError):
        parse_version("1.2.3-")


def test_compare_prerelease():
    assert compare_prerelease("rc.2", "rc.10") == -1
    assert compare_prerelease("beta", "alpha") == 1
    assert compare_prerelease("1", "alpha") == -1
    assert compare_prerelease("alpha.1", "alpha") == 1
    assert compare_prerelease("alpha", "alpha.beta") == -1
    assert compare_prerelease("rc.1", "rc.1") == 0


def test_compare_versions():
    assert compare_versions("1.2.3", "1.2.4") == -1
    assert compare_versions("1.2.10", "1.2.9") == 1
    assert compare_versions("1.2.3", "v1.2.3") == 0
    assert compare_versions("1.0.0-rc.1", "1.0.0") == -1
    assert compare_versions("1.0.0", "1.0.0-rc.1") == 1
    assert compare_versions("1.0.0-rc.2", "1.0.0-rc.10") == -1


def test_bump_version():
    assert bump_version("1.4.2", "major") == "2.0.0"
    assert bump_version("1.4.2", "minor") == "1.5.0"
    assert bump_version("1.4.2") == "1.4.3"
    assert bump_version("2.0.0-rc.1") == "2.0.0"
    assert bump_version("2.0.0-rc.1", "minor") == "2.1.0"
    with pytest.raises(ValueError):
        bump_version("1.0.0", "build")


def test_parse_hex_color():
    assert parse_hex_color("#ff8800") == (255, 136, 0)
    assert parse_hex_color("#F80") == (255, 136, 0)
    assert parse_hex_color("#123456") == (18, 52, 86)
    with pytest.raises(ValueError):
        parse_hex_color("ff8800")
    with pytest.raises(ValueError):
        parse_hex_color("#ff88")
    with pytest.raises(ValueError):
        parse_hex_color("#12345g")


def test_format_hex_color():
    assert format_hex_color(255, 136, 0) == "#ff8800"
    assert format_hex_color(255, 136, 0, True) == "#f80"
    assert format_hex_color(255, 137, 0, True) == "#ff8900"
    assert format_hex_color(1, 2, 3) == "#010203"
    with pytest.raises(ValueError):
        format_hex_color(256, 0, 0)
    with pytest.raises(ValueError):
        format_hex_color(0, 0, -1)


def test_mask_card():
    assert mask_card("4111 1111 1111 1111") == "**** **** **** 1111"
    assert mask_card("378282246310005") == "*** **** **** 0005"
    assert mask_card("4111-1111-1111-1111", 6, "#") == "#### #### ##11 1111"
    assert mask_card("12345", 0) == "* ****"
    assert mask_card("1234") == "****"
    with pytest.raises(ValueError):
        mask_card("4111111111111111", -1)


def test_card_brand():
    assert card_brand("4111 1111 1111 1111") == "visa"
    assert card_brand("4222222222222") == "visa"
    assert card_brand("3782 822463 10005") == "amex"
    assert card_brand("5105105105105100") == "mastercard"
    assert card_brand("5555-5555-5555-4444") == "mastercard"
    assert card_brand("5600000000000000") is None


def test_password_score():
    assert password_score("aaaaaaaa") == 0
    assert password_score("abababababab") == 2
    assert password_score("Passwor") == 1
    assert password_score("Password") == 2
    assert password_score("Password123") == 3
    assert password_score("Passw0rd!") == 4
