import pytest

from geomkit import (
    bounding_box, centroid, circle_contains, clamp_point, distance, is_convex, lerp, nearest_point, on_segment,
    orientation, polygon_area, polygon_perimeter, rect_area, rect_contains, rect_intersection, rect_perimeter,
    rects_intersect, rotate90, scale_points, segments_intersect, snap_to_grid, translate,
)


def test_distance():
    assert distance((0, 0), (3, 4)) == 5.0
    assert distance((1, 2), (4, -2), "manhattan") == 7
    assert distance((1, 2), (4, -2), "chebyshev") == 4
    assert distance((-1, -1), (-1, -1)) == 0
    with pytest.raises(ValueError):
        distance((0, 0), (1, 1), "taxicab")


def test_nearest_point():
    assert nearest_point((1, -3), [(-1, 3), (1, 3), (-2, 4)]) == (1, 3)
    assert nearest_point((0, 5), [(0, 7), (2, 5), (4, 4)]) == (0, 7)
    assert nearest_point((0, 6), [(5, -1), (2, 6), (4, 6)]) == (2, 6)
    assert nearest_point((7, 7), [(1, 1)]) == (1, 1)
    with pytest.raises(ValueError):
        nearest_point((0, 0), [])


def test_lerp():
    assert lerp((0, 0), (4, -2)) == (2, -1)
    assert lerp((1, 3), (5, 11), 0.25) == (2, 5)
    assert lerp((1, 3), (5, 11), 2) == (9, 19)
    assert lerp((1, 3), (5, 11), 2, clamp=True) == (5, 11)
    assert lerp((1, 3), (5, 11), -1, clamp=True) == (1, 3)


def test_rotate90():
    assert rotate90((1, 0)) == (0, 1)
    assert rotate90((1, 0), clockwise=True) == (0, -1)
    assert rotate90((3, 2), (1, 2)) == (1, 4)
    assert rotate90((3, 3), (1, 2), clockwise=True) == (2, 0)
    assert rotate90((-2, 5), (-2, 5)) == (-2, 5)


def test_translate():
    assert translate([(1, 2), (-3, 4)], 2, -5) == [(3, -3), (-1, -1)]
    assert translate([(1, 2)], 3) == [(4, 2)]
    assert translate([(0, 0)], -1.5, 0.5) == [(-1.5, 0.5)]
    assert translate([], 1, 1) == []


def test_scale_points():
    assert scale_points([(1, 2), (-3, 4)], 2) == [(2, 4), (-6, 8)]
    assert scale_points([(3, 5)], 2, centre=(1, 2)) == [(5, 8)]
    assert scale_points([(3, 5)], 2, 3) == [(6, 15)]
    assert scale_points([(3, 5), (7, -2)], 0, centre=(1, 2)) == [(1, 2), (1, 2)]
    assert scale_points([], 4) == []


def test_snap_to_grid():
    assert snap_to_grid((2.4, -2.6)) == (2, -3)
    assert snap_to_grid((2.5, -2.5)) == (3, -2)
    assert snap_to_grid((4, -5), 3) == (3, -6)
    assert snap_to_grid((1.3, 0.2), 0.5) == (1.5, 0.0)
    assert snap_to_grid((14, 4), 10, (5, -2)) == (15, 8)
    with pytest.raises(ValueError):
        snap_to_grid((1, 1), 0)


def test_centroid():
    assert centroid([(0, 0), (2, 0), (2, 2), (0, 2)]) == (1, 1)
    assert centroid([(0, 0), (6, 0), (0, 3)]) == (2, 1)
    assert centroid([(-4, 7)]) == (-4, 7)
    assert centroid([(-1, -2), (-3, -4)]) == (-2, -3)
    with pytest.raises(ValueError):
        centroid([])


def test_bounding_box():
    assert bounding_box([(1, 5), (-2, 3), (4, -1)]) == (-2, -1, 4, 5)
    assert bounding_box([(0, 0), (2, 7), (5, 1)]) == (0, 0, 5, 7)
    assert bounding_box([(3, 3)]) == (3, 3, 3, 3)
    with pytest.raises(ValueError):
        bounding_box([])


def test_rect_area():
    assert rect_area((0, 0, 4, 3)) == 12
    assert rect_area((-2, -1, 2, 1)) == 8
    assert rect_area((1, 0, 1, 5)) == 0
    assert rect_area((0, 2, 5, 2)) == 0
    with pytest.raises(ValueError):
        rect_area((3, 0, 1, 1))
    with pytest.raises(ValueError):
        rect_area((0, 3, 1, 1))


def test_rect_perimeter():
    assert rect_perimeter((0, 0, 4, 3)) == 14
    assert rect_perimeter((-2, -1, 2, 1)) == 12
    assert rect_perimeter((1, 0, 1, 5)) == 10
    assert rect_perimeter((0, 2, 5, 2)) == 10
    with pytest.raises(ValueError):
        rect_perimeter((3, 0, 1, 1))
    with pytest.raises(ValueError):
        rect_perimeter((0, 3, 1, 1))


def test_rect_contains():
    assert rect_contains((0, 0, 4, 3), (0, 0)) is True
    assert rect_contains((0, 0, 4, 3), (4, 3)) is True
    assert rect_contains((0, 0, 4, 3), (-1, 1)) is False
    assert rect_contains((0, 0, 4, 3), (2, 1), inclusive=False) is True
    assert rect_contains((0, 0, 4, 3), (0, 1), inclusive=False) is False
    assert rect_contains((0, 0, 4, 3), (2, 3), inclusive=False) is False


def test_rects_intersect():
    assert rects_intersect((0, 5, 2, 8), (1, 6, 6, 7)) is True
    assert rects_intersect((0, 1, 2, 4), (3, 0, 5, 2)) is False
    assert rects_intersect((0, 1, 2, 4), (2, 0, 5, 3)) is False
    assert rects_intersect((0, 0, 2, 2), (1, 2, 3, 4)) is False
    assert rects_intersect((0, 0, 2, 2), (2, 2, 4, 4), touching=True) is True
    assert rects_intersect((0, 0, 2, 2), (2, 3, 4, 5), touching=True) is False


def test_rect_intersection():
    assert rect_intersection((0, 0, 4, 4), (2, 1, 6, 3)) == (2, 1, 4, 3)
    assert rect_intersection((1, -2, 3, 4), (0, -1, 5, 6)) == (1, -1, 3, 4)
    assert rect_intersection((0, 0, 2, 2), (3, 0, 5, 2)) is None
    assert rect_intersection((0, 0, 2, 2), (0, 3, 2, 5)) is None
    assert rect_intersection((0, 0, 2, 2), (2, 0, 4, 2)) == (2, 0, 2, 2)
    assert rect_intersection((0, 0, 2, 2), (0, 2, 2, 4)) == (0, 2, 2, 2)


def test_clamp_point():
    assert clamp_point((2, 1), (0, 0, 4, 3)) == (2, 1)
    assert clamp_point((-5, 1), (0, 0, 4, 3)) == (0, 1)
    assert clamp_point((2, 9), (0, 0, 4, 3)) == (2, 3)
    assert clamp_point((7, -2), (0, 0, 4, 3)) == (4, 0)
    assert clamp_point((-5, 5), (-1, -2, -1, -2)) == (-1, -2)
    with pytest.raises(ValueError):
        clamp_point((0, 0), (0, 0, -1, 1))


def test_circle_contains():
    assert circle_contains((0, 0), 5, (3, 4)) is True
    assert circle_contains((0, 0), 5, (3, 4), inclusive=False) is False
    assert circle_contains((2, -1), 3, (4, 1), inclusive=False) is True
    assert circle_contains((1, -1), 2, (4, -1)) is False
    assert circle_contains((-2, -2), 0, (-2, -2)) is True
    with pytest.raises(ValueError):
        circle_contains((0, 0), -1, (0, 0))


def test_orientation():
    assert orientation((1, 2), (2, 2), (5, 3)) == 1
    assert orientation((1, 2), (5, 2), (2, 1)) == -1
    assert orientation((1, 3), (2, 5), (4, 9)) == 0
    assert orientation((1, 2), (2, 2), (5, 3), eps=1) == 0
    assert orientation((1, 2), (2, 2), (5, 1), eps=1) == 0
    with pytest.raises(ValueError):
        orientation((0, 0), (1, 0), (0, 1), eps=-1)


def test_polygon_area():
    assert polygon_area([(0, 0), (4, 0), (4, 3), (0, 3)]) == 12
    assert polygon_area([(0, 0), (4, 0), (4, 3), (0, 3)], signed=True) == 12
    assert polygon_area([(0, 3), (4, 3), (4, 0), (0, 0)], signed=True) == -12
    assert polygon_area([(0, 3), (4, 3), (4, 0), (0, 0)]) == 12
    assert polygon_area([(1, 1), (3, 1), (1, 2)]) == 1
    with pytest.raises(ValueError):
        polygon_area([(0, 0), (1, 1)])


def test_polygon_perimeter():
    assert polygon_perimeter([(1, 2), (1, 5), (5, 2)]) == 12
    assert polygon_perimeter([(1, 2), (1, 5), (5, 2)], closed=False) == 8
    assert polygon_perimeter([(1, 1), (4, 5)]) == 5
    assert polygon_perimeter([(-1, -1), (1, -1), (1, 1), (-1, 1)]) == 8
    assert polygon_perimeter([(2, 2)]) == 0
    assert polygon_perimeter([]) == 0


def test_is_convex():
    assert is_convex([(1, 3), (4, 3), (4, 5), (1, 5)]) is True
    assert is_convex([(1, 0), (0, 4), (3, 1)]) is True
    assert is_convex([(2, 1), (4, 0), (2, 3), (0, 0)]) is False
    assert is_convex([(1, 2), (2, 2), (3, 2), (3, 3)]) is True
    assert is_convex([(1, 0), (2, 3), (3, 6)]) is False
    assert is_convex([(0, 0), (1, 0)]) is False


def test_on_segment():
    assert on_segment((3, 3), (1, 2), (5, 4)) is True
    assert on_segment((5, 4), (1, 2), (5, 4)) is True
    assert on_segment((2, 3), (5, 4), (1, 2)) is False
    assert on_segment((7, 8), (5, 8), (1, 8)) is False
    assert on_segment((2, 6), (2, 1), (2, 4)) is False
    assert on_segment((2, 1), (2, 4), (2, 1)) is True


def test_segments_intersect():
    assert segments_intersect((2, 2), (5, 0), (1, 6), (3, 1)) is True
    assert segments_intersect((1, 6), (1, 4), (0, 5), (5, 0)) is True
    assert segments_intersect((0, 1), (2, 1), (2, 1), (5, 1)) is True
    assert segments_intersect((0, -4), (1, -4), (3, -4), (2, -4)) is False
    assert segments_intersect((2, 6), (2, 7), (2, 5), (2, 3)) is False
    assert segments_intersect((3, 6), (5, 2), (6, 1), (6, 0)) is False
