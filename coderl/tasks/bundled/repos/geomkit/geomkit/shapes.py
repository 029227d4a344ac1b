"""Axis-aligned rectangles ``(xmin, ymin, xmax, ymax)`` and circles."""

from geomkit.points import Point

Rect = tuple[float, float, float, float]


def bounding_box(points: list[Point]) -> Rect:
    """Smallest rectangle containing every point."""
    if not points:
        raise ValueError("bounding box of no points")
    xmin, ymin = points[0]
    xmax, ymax = points[0]
    for x, y in points[1:]:
        xmin = min(xmin, x)
        ymin = min(ymin, y)
        xmax = max(xmax, x)
        ymax = max(ymax, y)
    return (xmin, ymin, xmax, ymax)


def rect_area(r: Rect) -> float:
    """Area of a rectangle; an inverted rectangle is an error."""
    xmin, ymin, xmax, ymax = r
    if xmax < xmin or ymax < ymin:
        raise ValueError(f"inverted rectangle: {r!r}")
    return (xmax - xmin) * (ymax - ymin)


def rect_perimeter(r: Rect) -> float:
    """Perimeter of a rectangle; an inverted rectangle is an error."""
    xmin, ymin, xmax, ymax = r
    if xmax < xmin or ymax < ymin:
        raise ValueError(f"inverted rectangle: {r!r}")
    return 2 * ((xmax - xmin) + (ymax - ymin))


def rect_contains(r: Rect, p: Point, inclusive: bool = True) -> bool:
    """Whether ``p`` lies in ``r``; points on the edges count only when ``inclusive``."""
    xmin, ymin, xmax, ymax = r
    x, y = p
    if inclusive:
        return xmin <= x <= xmax and ymin <= y <= ymax
    return xmin < x < xmax and ymin < y < ymax


def rects_intersect(a: Rect, b: Rect, touching: bool = False) -> bool:
    """Whether two rectangles overlap; sharing only an edge or corner counts when ``touching``."""
    ox = min(a[2], b[2]) - max(a[0], b[0])
    oy = min(a[3], b[3]) - max(a[1], b[1])
    if touching:
        return ox >= 0 and oy >= 0
    return ox > 0 and oy > 0


def rect_intersection(a: Rect, b: Rect) -> Rect | None:
    """Common part of two rectangles (possibly zero-width when they touch), or None when disjoint."""
    xmin = max(a[0], b[0])
    ymin = max(a[1], b[1])
    xmax = min(a[2], b[2])
    ymax = min(a[3], b[3])
    if xmin > xmax or ymin > ymax:
        return None
    return (xmin, ymin, xmax, ymax)


def clamp_point(p: Point, r: Rect) -> Point:
    """The point of ``r`` nearest to ``p``."""
    xmin, ymin, xmax, ymax = r
    if xmax < xmin or ymax < ymin:
        raise ValueError(f"inverted rectangle: {r!r}")
    x = min(max(p[0], xmin), xmax)
    y = min(max(p[1], ymin), ymax)
    return (x, y)


def circle_contains(centre: Point, radius: float, p: Point, inclusive: bool = True) -> bool:
    """Whether ``p`` lies in the circle; the boundary counts only when ``inclusive``."""
    if radius < 0:
        raise ValueError("radius must not be negative")
    dx = p[0] - centre[0]
    dy = p[1] - centre[1]
    d2 = dx * dx + dy * dy
    if inclusive:
        return d2 <= radius * radius
    return d2 < radius * radius
