"""Money in integer cents: splitting, discounts, tax, interest, loans and formatting."""

from decimal import ROUND_HALF_UP, Decimal

from unitkit.human import format_thousands

_ONE = Decimal(1)


def split_cents(total: int, parts: int) -> list[int]:
    """Split ``total`` cents into ``parts`` shares differing by at most a cent; earlier shares get the extra cents."""
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    if total < 0:
        return [-share for share in split_cents(-total, parts)]
    base, extra = divmod(total, parts)
    return [base + 1 if i < extra else base for i in range(parts)]


def allocate_cents(total: int, weights: list[int]) -> list[int]:
    """Share ``total`` cents in proportion to ``weights`` (largest remainder first; ties go to earlier shares)."""
    if total < 0:
        raise ValueError("total must not be negative")
    if not weights or any(w < 0 for w in weights):
        raise ValueError("weights must be a non-empty list of non-negative numbers")
    weight_sum = sum(weights)
    if weight_sum == 0:
        raise ValueError("weights must not all be zero")
    shares = [total * w // weight_sum for w in weights]
    remainders = [total * w % weight_sum for w in weights]
    left = total - sum(shares)
    order = sorted(range(len(weights)), key=lambda i: (-remainders[i], i))
    for i in order[:left]:
        shares[i] += 1
    return shares


def apply_discount(cents: int, percent: float) -> int:
    """Price after a ``percent`` discount, the discount rounded half up to whole cents."""
    if not 0 <= percent <= 100:
        raise ValueError(f"percent must be between 0 and 100, got {percent}")
    discount = Decimal(cents) * Decimal(str(percent)) / 100
    return cents - int(discount.quantize(_ONE, rounding=ROUND_HALF_UP))


def progressive_tax(income: int, brackets: list[tuple[int | None, float]]) -> int:
    """Tax in cents on ``income`` cents; each (upper bound, rate percent) bracket taxes only its own slice."""
    if income < 0:
        raise ValueError("income must not be negative")
    tax = Decimal(0)
    lower = 0
    for upper, rate in brackets:
        if upper is not None and upper <= lower:
            raise ValueError("bracket bounds must increase")
        top = income if upper is None else min(income, upper)
        tax += Decimal(top - lower) * Decimal(str(rate)) / 100
        if upper is None or income <= upper:
            return int(tax.quantize(_ONE, rounding=ROUND_HALF_UP))
        lower = upper
    raise ValueError("income exceeds the last bracket; end the brackets with an open (None) bound")


def compound_amount(principal: int, rate: float, periods: int) -> int:
    """``principal`` cents after ``periods`` periods compounding at ``rate`` percent each, rounded to cents."""
    if periods < 0:
        raise ValueError("periods must not be negative")
    if rate <= -100:
        raise ValueError("rate must be above -100 percent")
    amount = Decimal(principal)
    factor = 1 + Decimal(str(rate)) / 100
    for _ in range(periods):
        amount *= factor
    return int(amount.quantize(_ONE, rounding=ROUND_HALF_UP))


def loan_payment(principal: int, annual_rate: float, months: int) -> int:
    """Monthly annuity payment in cents; at a zero rate the principal is spread evenly, rounded up."""
    if months < 1:
        raise ValueError("months must be at least 1")
    if annual_rate == 0:
        return -(-principal // months)
    r = Decimal(str(annual_rate)) / 1200
    payment = principal * r / (1 - (1 + r) ** -months)
    return int(payment.quantize(_ONE, rounding=ROUND_HALF_UP))


def amortization_schedule(principal: int, annual_rate: float, months: int) -> list[tuple[int, int, int, int]]:
    """Rows of (month, interest, principal repaid, balance left) in cents; the last payment clears the balance."""
    payment = loan_payment(principal, annual_rate, months)
    r = Decimal(str(annual_rate)) / 1200
    balance = principal
    rows = []
    for month in range(1, months + 1):
        interest = int((balance * r).quantize(_ONE, rounding=ROUND_HALF_UP))
        repaid = payment - interest
        if month == months or repaid > balance:
            repaid = balance
        balance -= repaid
        rows.append((month, interest, repaid, balance))
    return rows


def format_money(cents: int, symbol: str = "$", sep: str = ",", point: str = ".", suffix: bool = False) -> str:
    """1234567 -> '$12,345.67'; the sign goes first ('-$0.05'); suffix=True writes '12.345,67 €' style."""
    sign = "-" if cents < 0 else ""
    whole, frac = divmod(abs(cents), 100)
    amount = f"{format_thousands(whole, sep)}{point}{frac:02d}"
    if suffix:
        return f"{sign}{amount} {symbol}"
    return f"{sign}{symbol}{amount}"


def parse_money(text: str, symbol: str = "$") -> int:
    """'$1,234.5' -> 123450, '-$0.05' -> -5, '12' -> 1200; commas are ignored, more than two decimals is an error."""
    s = text.strip()
    negative = s.startswith("-")
    if negative:
        s = s[1:].lstrip()
    if symbol and s.startswith(symbol):
        s = s[len(symbol):].lstrip()
    whole, dot, frac = s.replace(",", "").partition(".")
    if not whole.isdecimal() or len(frac) > 2 or (dot and not frac.isdecimal()):
        raise ValueError(f"not an amount of money: {text!r}")
    cents = int(whole) * 100 + int(frac.ljust(2, "0"))
    return -cents if negative else cents
