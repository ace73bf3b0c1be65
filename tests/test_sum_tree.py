import numpy as np
import pytest

from rlframe.replays.sum_tree import SumTree


def assert_sums_consistent(tree: SumTree):
    """Every inner node equals the sum of its children."""
    t = tree.tree
    parents = np.arange(1, tree.n_leaves)
    np.testing.assert_allclose(t[parents], t[2 * parents] + t[2 * parents + 1], rtol=1e-12)


def expected_valid(T, t, full, off_backward, off_forward):
    """Rows (time index) that may be sampled, from the ages of stored rows."""
    count = T if full else t
    valid = np.zeros(T, dtype=bool)
    for age in range(off_backward, count - off_forward):
        valid[(t - 1 - age) % T] = True
    return valid


def test_sampling_frequencies_follow_priorities():
    np.random.seed(0)
    T, B = 30, 3
    tree = SumTree(T, B, off_backward=0, off_forward=0, enable_input_priorities=True)
    priorities = np.random.uniform(0.1, 5., size=(T, B))
    priorities[4, 1] = 40.  # one dominant entry
    tree.advance(T, priorities=priorities)
    np.testing.assert_allclose(tree.priorities, priorities)
    assert tree.total == pytest.approx(priorities.sum())
    n = 200_000
    (T_idxs, B_idxs), drawn = tree.sample(n)
    np.testing.assert_allclose(drawn, priorities[T_idxs, B_idxs])
    counts = np.bincount(T_idxs * B + B_idxs, minlength=T * B)
    expected = n * priorities.ravel() / priorities.sum()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    dof = T * B - 1
    assert chi2 < dof + 6 * np.sqrt(2 * dof), chi2  # ~6 sigma: not flaky
    assert abs(counts[4 * B + 1] / expected[4 * B + 1] - 1) < 0.03


def test_update_batch_priorities_and_duplicates():
    np.random.seed(1)
    tree = SumTree(T=16, B=2, off_backward=1, off_forward=1)
    tree.advance(16)  # fills and wraps: cursor back at 0
    (T_idxs, B_idxs), _ = tree.sample(64)
    new = np.random.uniform(0.5, 2., size=64)
    tree.update_batch_priorities(new)
    # Each drawn row has the priority of its first draw.
    leaves = T_idxs * 2 + B_idxs
    _, first = np.unique(leaves, return_index=True)
    for i in first:
        assert tree.priorities[T_idxs[i], B_idxs[i]] == pytest.approx(new[i])
    assert_sums_consistent(tree)
    assert tree.total == pytest.approx(tree.priorities.sum())
    with pytest.raises(ValueError, match="3 priorities"):
        tree.update_batch_priorities(np.ones(3))


def test_update_skips_rows_invalidated_since_sampling():
    tree = SumTree(T=8, B=1, off_backward=2, off_forward=1)
    tree.advance(8)
    tree.sample(50)
    tree.advance(3)  # cursor moves: some drawn rows are now in the invalid zone
    tree.update_batch_priorities(np.full(50, 7.))
    valid = expected_valid(8, tree.t, True, 2, 1)
    assert np.all(tree.priorities[~valid, 0] == 0)
    assert_sums_consistent(tree)


@pytest.mark.parametrize("off_backward,off_forward", [(1, 1), (3, 1), (0, 2), (4, 3)])
def test_wraparound_matches_validity_reference(off_backward, off_forward):
    rng = np.random.default_rng(2)
    T, B = 13, 2
    tree = SumTree(T, B, off_backward, off_forward, default_value=2.)
    t, full = 0, False
    for _ in range(40):
        T_new = int(rng.integers(1, T + 1))
        tree.advance(T_new)
        full = full or t + T_new >= T
        t = (t + T_new) % T
        assert tree.t == t
        valid = expected_valid(T, t, full, off_backward, off_forward)
        np.testing.assert_array_equal(tree.priorities > 0, np.repeat(valid[:, None], B, 1))
        assert np.all(tree.priorities[valid] == 2.)
        assert_sums_consistent(tree)


def test_invalid_zone_near_cursor_never_sampled():
    np.random.seed(3)
    T, B, b, f = 20, 4, 3, 2
    tree = SumTree(T, B, off_backward=b, off_forward=f)
    for T_new in (7, 7, 7, 5):  # wraps once, cursor ends at 6
        tree.advance(T_new)
    (T_idxs, _), _ = tree.sample(20_000)
    forbidden = {(tree.t - 1 - a) % T for a in range(b)} | {(tree.t + a) % T for a in range(f)}
    assert not forbidden & set(T_idxs.tolist())
    assert set(T_idxs.tolist()) == set(range(T)) - forbidden


def test_before_wrap_oldest_rows_and_unwritten_rows_stay_zero():
    tree = SumTree(T=10, B=1, off_backward=2, off_forward=1)
    tree.advance(6)
    # Stored rows 0..5: row 0 (oldest, f=1) and rows 4, 5 (newest, b=2) invalid.
    np.testing.assert_array_equal(tree.priorities[:, 0] > 0,
                                  [0, 1, 1, 1, 0, 0, 0, 0, 0, 0])


def test_input_priorities_with_shift():
    T, B = 10, 1
    tree = SumTree(T, B, off_backward=2, off_forward=1, default_value=1.,
                   enable_input_priorities=True, input_priority_shift=1)
    tree.advance(4, priorities=np.array([10., 11., 12., 13.])[:, None])
    # Chunk row k feeds row k - 1: row -1 does not exist yet and is dropped.
    np.testing.assert_array_equal(tree.input_priorities[:4, 0], [11., 12., 13., 1.])
    # Valid now: rows 1 (row 0 is the oldest, rows 2, 3 the newest).
    np.testing.assert_array_equal(tree.priorities[:, 0], [0, 12., 0, 0, 0, 0, 0, 0, 0, 0])
    tree.advance(3, priorities=np.array([20., 21., 22.])[:, None])
    np.testing.assert_array_equal(tree.input_priorities[3:7, 0], [20., 21., 22., 1.])
    np.testing.assert_array_equal(tree.priorities[:6, 0], [0, 12., 13., 20., 21., 0])
    # [B] and scalar priorities broadcast over the chunk.
    tree.advance(2, priorities=5.)
    np.testing.assert_array_equal(tree.priorities[:7, 0], [0, 12., 13., 20., 21., 22., 5.])
    assert_sums_consistent(tree)


def test_input_priority_arriving_after_row_is_valid_takes_effect():
    tree = SumTree(T=12, B=1, off_backward=1, off_forward=1, enable_input_priorities=True,
                   input_priority_shift=3)
    tree.advance(6)  # rows 1..4 valid with default 1
    tree.advance(1, priorities=[9.])  # row 6's input is for row 3, already valid
    assert tree.priorities[3, 0] == 9.
    assert_sums_consistent(tree)


def test_rewritten_row_does_not_reuse_an_old_input_priority():
    tree = SumTree(T=6, B=1, off_backward=1, off_forward=1, enable_input_priorities=True,
                   input_priority_shift=2)
    tree.advance(6, priorities=np.arange(10., 16.)[:, None])  # row 0 gets input 12
    np.testing.assert_array_equal(tree.priorities[:, 0], [0, 13., 14., 15., 1., 0])
    tree.advance(1, priorities=[20.])  # row 0 rewritten; its input arrives two rows later
    tree.advance(1, priorities=[21.])  # row 0 valid now: default until its input comes
    assert tree.priorities[0, 0] == 1.
    tree.advance(1, priorities=[22.])
    assert tree.priorities[0, 0] == 22.
    assert_sums_consistent(tree)


def test_draw_at_the_total_never_lands_on_an_empty_leaf():
    # A draw equal to the total (what rounding can produce) would walk into the
    # empty right half; the guarded descent used for such strays does not.
    tree = SumTree(T=8, B=1, off_backward=0, off_forward=0, enable_input_priorities=True)
    tree.advance(8, priorities=np.array([.1, .2, .3, 0, 0, 0, 0, 0])[:, None])
    u = np.array([tree.total])
    assert tree.tree[tree._descend(u, guarded=False)][0] == 0
    assert tree.tree[tree._descend(u, guarded=True)][0] == .3


def test_unique_sampling_draws_distinct_rows():
    np.random.seed(4)
    tree = SumTree(T=10, B=2, off_backward=1, off_forward=1, enable_input_priorities=True)
    p = np.ones((10, 2))
    p[5] = 3.
    tree.advance(10, priorities=p)
    (T_idxs, B_idxs), _ = tree.sample(12, unique=True)
    assert len(set(zip(T_idxs.tolist(), B_idxs.tolist()))) == 12
    with pytest.raises(ValueError, match="distinct"):
        tree.sample(17, unique=True)  # only 8 rows x 2 envs are valid


def test_errors():
    with pytest.raises(ValueError, match="off_backward=3"):
        SumTree(T=4, B=1, off_backward=3, off_forward=1)
    tree = SumTree(T=8, B=1, off_backward=1, off_forward=1)
    with pytest.raises(ValueError, match="every priority is zero"):
        tree.sample(4)
    with pytest.raises(RuntimeError, match="before sample"):
        tree.update_batch_priorities([1.])
    with pytest.raises(ValueError, match="enable_input_priorities=False"):
        tree.advance(2, priorities=np.ones((2, 1)))
    with pytest.raises(ValueError, match="T=9"):
        tree.advance(9)


def test_print_tree(capsys):
    tree = SumTree(T=4, B=1, off_backward=0, off_forward=0)
    tree.advance(4)
    tree.print_tree()
    out = capsys.readouterr().out
    assert "level 0: [4.]" in out and "level 2" in out
