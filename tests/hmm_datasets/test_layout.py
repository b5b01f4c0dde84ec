"""Where things sit in a row, and cutting rows to fewer demonstrations."""

import numpy as np
import pytest

from hmm_datasets import SampleLayout, keep_last_demos


def test_layout_positions():
    layout = SampleLayout(num_demos=2, demo_length=3, test_length=4)
    assert layout.sequence_length == 12 and layout.test_start == 8
    np.testing.assert_array_equal(layout.segment_ids(), [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
    np.testing.assert_array_equal(layout.delimiter_mask().nonzero()[0], [3, 7])
    np.testing.assert_array_equal(layout.test_prediction_positions(), [7, 8, 9, 10])
    # A test segment longer than a demonstration has no delimiter inside it.
    assert not SampleLayout(1, 2, 10).delimiter_mask()[3:].any()


def test_keep_last_demos_gives_a_row_of_the_smaller_layout():
    layout = SampleLayout(num_demos=3, demo_length=2, test_length=2)
    row = np.arange(layout.sequence_length)[None]
    np.testing.assert_array_equal(keep_last_demos(row, layout, 1), [[6, 7, 8, 9, 10]])
    assert keep_last_demos(row, layout, 0).shape == (1, 2)
    with pytest.raises(ValueError, match="num_demos=4 must be between 0 and 3"):
        keep_last_demos(row, layout, 4)
