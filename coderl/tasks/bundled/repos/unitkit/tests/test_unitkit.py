import pytest

from unitkit import (
    allocate_cents, amortization_schedule, apply_discount, average_speed, bmi, bmi_category, compound_amount,
    convert_length, convert_temperature, format_bitrate, format_hms, format_money, format_thousands, loan_payment,
    parse_money, percent_change, progressive_tax, rescale, round_to_step, split_cents, to_feet_inches,
    transfer_seconds,
)

BRACKETS = [(10_000, 10), (40_000, 30), (None, 45)]


def test_format_thousands():
    assert format_thousands(1234567) == "1,234,567"
    assert format_thousands(999) == "999"
    assert format_thousands(0) == "0"
    assert format_thousands(-1) == "-1"
    assert format_thousands(-1000, " ") == "-1 000"
    assert format_thousands(1234, "_", 1) == "1_2_3_4"
    with pytest.raises(ValueError):
        format_thousands(5, ",", 0)


def test_format_hms():
    assert format_hms(3723) == "1h 02m 03s"
    assert format_hms(0) == "0s"
    assert format_hms(90000) == "25h 00m 00s"
    assert format_hms(60) == "1m 00s"
    assert format_hms(59) == "59s"
    with pytest.raises(ValueError):
        format_hms(-1)


def test_format_bitrate():
    assert format_bitrate(0) == "0 bit/s"
    assert format_bitrate(999) == "999 bit/s"
    assert format_bitrate(1000) == "1.0 kbit/s"
    assert format_bitrate(999_960) == "1.0 Mbit/s"
    assert format_bitrate(2_346_000, 2) == "2.35 Mbit/s"
    assert format_bitrate(5e15) == "5000.0 Tbit/s"
    with pytest.raises(ValueError):
        format_bitrate(-1)


def test_transfer_seconds():
    assert transfer_seconds(1000, 8000) == 1
    assert transfer_seconds(1001, 8000) == 2
    assert transfer_seconds(0, 8000) == 0
    assert transfer_seconds(1000, 800, 25) == 13
    assert transfer_seconds(1, 1) == 8
    with pytest.raises(ValueError):
        transfer_seconds(1000, 0)
    with pytest.raises(ValueError):
        transfer_seconds(-1, 8000)
    with pytest.raises(ValueError):
        transfer_seconds(1000, 8000, -1)


def test_round_to_step():
    assert round_to_step(7.4, 5) == 5.0
    assert round_to_step(7.5, 5) == 10.0
    assert round_to_step(-7.5, 5) == -5.0
    assert round_to_step(0.375, 0.25) == 0.5
    assert round_to_step(4, 2, 1) == 5.0
    with pytest.raises(ValueError):
        round_to_step(3, 0)


def test_rescale():
    assert rescale(15, 10, 20, 0, 100) == 50.0
    assert rescale(15, 0, 10, 0, 100) == 100.0
    assert rescale(-5, 0, 10, 0, 100) == 0.0
    assert rescale(15, 0, 10, 0, 100, clamp=False) == 150.0
    assert rescale(25, 0, 100, 1, 0) == 0.75
    with pytest.raises(ValueError):
        rescale(3, 2, 2, 0, 1)


def test_percent_change():
    assert percent_change(50, 75) == 50.0
    assert percent_change(200, 150) == -25.0
    assert percent_change(-10, -5) == 50.0
    assert percent_change(3, 4) == 33.3
    assert percent_change(3, 4, 2) == 33.33
    with pytest.raises(ValueError):
        percent_change(0, 5)


def test_convert_temperature():
    assert convert_temperature(100, "C", "F") == 212.0
    assert convert_temperature(98.6, "f", "c") == 37.0
    assert convert_temperature(0, "K", "C") == -273.15
    assert convert_temperature(-459.67, "F", "K") == 0.0
    with pytest.raises(ValueError):
        convert_temperature(-273.16, "C", "K")
    with pytest.raises(ValueError):
        convert_temperature(10, "C", "X")


def test_convert_length():
    assert convert_length(1, "ft", "in") == 12.0
    assert convert_length(1, "mi", "km") == 1.609344
    assert convert_length(250, "cm", "m") == 2.5
    assert convert_length(1, "m", "ft", 3) == 3.281
    assert convert_length(3, "yd", "mm") == 2743.2
    with pytest.raises(ValueError):
        convert_length(1, "m", "furlong")
    with pytest.raises(ValueError):
        convert_length(1, "furlong", "m")


def test_to_feet_inches():
    assert to_feet_inches(1.8) == (5, 11)
    assert to_feet_inches(1.8288) == (6, 0)
    assert to_feet_inches(1.82) == (6, 0)
    assert to_feet_inches(0.0127) == (0, 1)
    assert to_feet_inches(0) == (0, 0)
    with pytest.raises(ValueError):
        to_feet_inches(-0.1)


def test_average_speed():
    assert average_speed(1000, 420) == 8.6
    assert average_speed(1000, 100, "m/s") == 10.0
    assert average_speed(1609.344, 60, "mph") == 60.0
    assert average_speed(100, 9.58, "m/s", 2) == 10.44
    assert average_speed(0, 1) == 0.0
    with pytest.raises(ValueError):
        average_speed(100, 0)
    with pytest.raises(ValueError):
        average_speed(-1, 10)
    with pytest.raises(ValueError):
        average_speed(100, 10, "knots")


def test_bmi():
    assert bmi(70, 1.75) == 22.9
    assert bmi(1, 1) == 1.0
    assert bmi(81, 1.8, 2) == 25.0
    assert bmi(90, 3) == 10.0
    with pytest.raises(ValueError):
        bmi(0, 1.8)
    with pytest.raises(ValueError):
        bmi(70, 0)
    with pytest.raises(ValueError):
        bmi(70, 3.5)


def test_bmi_category():
    assert bmi_category(18.4) == "underweight"
    assert bmi_category(18.5) == "normal"
    assert bmi_category(24.9) == "normal"
    assert bmi_category(25) == "overweight"
    assert bmi_category(29.9) == "overweight"
    assert bmi_category(30) == "obese"


def test_split_cents():
    assert split_cents(100, 3) == [34, 33, 33]
    assert split_cents(101, 3) == [34, 34, 33]
    assert split_cents(5, 1) == [5]
    assert split_cents(0, 3) == [0, 0, 0]
    assert split_cents(-1, 3) == [-1, 0, 0]
    with pytest.raises(ValueError):
        split_cents(100, 0)


def test_allocate_cents():
    assert allocate_cents(100, [1, 1, 1]) == [34, 33, 33]
    assert allocate_cents(10, [1, 2]) == [3, 7]
    assert allocate_cents(3, [4, 5]) == [1, 2]
    assert allocate_cents(5, [0, 1]) == [0, 5]
    assert allocate_cents(0, [1, 2]) == [0, 0]
    with pytest.raises(ValueError):
        allocate_cents(5, [0, 0])
    with pytest.raises(ValueError):
        allocate_cents(5, [2, -1])
    with pytest.raises(ValueError):
        allocate_cents(-1, [1])


def test_apply_discount():
    assert apply_discount(1000, 10) == 900
    assert apply_discount(999, 10) == 899
    assert apply_discount(1005, 10) == 904
    assert apply_discount(1000, 100) == 0
    assert apply_discount(1000, 0) == 1000
    with pytest.raises(ValueError):
        apply_discount(1000, 101)
    with pytest.raises(ValueError):
        apply_discount(1000, -1)


def test_progressive_tax():
    assert progressive_tax(0, BRACKETS) == 0
    assert progressive_tax(10_005, BRACKETS) == 1002
    assert progressive_tax(50_000, BRACKETS) == 14_500
    assert progressive_tax(44, [(44, 10)]) == 4
    with pytest.raises(ValueError):
        progressive_tax(-1, BRACKETS)
    with pytest.raises(ValueError):
        progressive_tax(50_000, [(40_000, 10)])
    with pytest.raises(ValueError):
        progressive_tax(50, [(10, 10), (10, 20), (None, 30)])


def test_compound_amount():
    assert compound_amount(10_000, 10, 2) == 12_100
    assert compound_amount(1000, 5, 2) == 1103
    assert compound_amount(10_000, 10, 0) == 10_000
    assert compound_amount(10_000, -99.5, 1) == 50
    with pytest.raises(ValueError):
        compound_amount(10_000, 5, -1)
    with pytest.raises(ValueError):
        compound_amount(10_000, -100, 1)


def test_loan_payment():
    assert loan_payment(100_000, 12, 12) == 8885
    assert loan_payment(100_000, 12, 1) == 101_000
    assert loan_payment(120_000, 0, 12) == 10_000
    assert loan_payment(100, 0, 3) == 34
    with pytest.raises(ValueError):
        loan_payment(100_000, 12, 0)


def test_amortization_schedule():
    assert amortization_schedule(100_000, 12, 3) == [(1, 1000, 33002, 66998), (2, 670, 33332, 33666), (3, 337, 33666, 0)]
    assert amortization_schedule(100, 0, 3) == [(1, 0, 34, 66), (2, 0, 34, 32), (3, 0, 32, 0)]
    assert amortization_schedule(5, 0, 4) == [(1, 0, 2, 3), (2, 0, 2, 1), (3, 0, 1, 0), (4, 0, 0, 0)]
    assert amortization_schedule(500, 6, 1) == [(1, 3, 500, 0)]


def test_format_money():
    assert format_money(1234567) == "$12,345.67"
    assert format_money(0) == "$0.00"
    assert format_money(5) == "$0.05"
    assert format_money(-1) == "-$0.01"
    assert format_money(100000) == "$1,000.00"
    assert format_money(1234567, "€", ".", ",", suffix=True) == "12.345,67 €"


def test_parse_money():
    assert parse_money("$1,234.56") == 123456
    assert parse_money("-12") == -1200
    assert parse_money("0.5") == 50
    assert parse_money("-$0.05") == -5
    assert parse_money("€3.10", "€") == 310
    with pytest.raises(ValueError):
        parse_money("1.234")
    with pytest.raises(ValueError):
        parse_money("12.")
