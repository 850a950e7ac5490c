import gc

import pytest

from dlsched.collector import YOUNG_OBJECTS_BEFORE_COLLECTING, fewer_collections
from dlsched.errors import SpecError
from dlsched.prepare import prepare


def test_the_collector_is_put_back_after_a_run_and_after_an_error():
    before = gc.get_threshold()
    with fewer_collections():
        assert gc.get_threshold()[0] == max(before[0], YOUNG_OBJECTS_BEFORE_COLLECTING)
        assert gc.get_freeze_count() > 0  # the objects alive before
        with fewer_collections():  # nested: it leaves what the outer one froze frozen
            pass
        # (not an exact count: another thread's frozen objects may be freed meanwhile)
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    with pytest.raises(SpecError):
        prepare("synthetic", "1x1", trace_params={"num_jobs": -1})
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
