"""How the suite is dealt to pytest-xdist's workers (tests/support/scheduling.py), read
from the suite's own modules: a module fixture is built by one worker only, and a
module on the emulated cluster stays on one worker."""

from __future__ import annotations

import textwrap

from tests.conftest import ROOT
from tests.support.scheduling import CLUSTER_GROUP, SHARED_GROUP, unit_of_work


def _unit(nodeid: str, root=ROOT) -> str | None:
    return unit_of_work(root, nodeid)


def test_the_tests_of_a_module_fixture_go_together_and_the_others_alone():
    report = "tests/integration/test_report.py"
    shared = f"{SHARED_GROUP}:{report}"
    # Both ask for the sweep (through the report fixture or directly).
    assert _unit(f"{report}::test_report_renders_every_cell_and_figure_in_chromium") == shared
    assert _unit(f"{report}::test_report_lists_every_cell_with_its_status") == shared
    # Chromium's console check builds a page of its own.
    assert _unit(f"{report}::test_chromium_shows_a_console_error") is None
    engines = "tests/integration/test_torch_engines.py"
    assert _unit(f"{engines}::test_two_workers_train_above_chance[ddp]") == \
        f"{SHARED_GROUP}:{engines}"
    assert _unit(f"{engines}::test_slices_cover_the_parameters_once") is None
    accuracy = "tests/integration/test_accuracy.py"
    assert _unit(f"{accuracy}::test_lenet_learns_real_digits_on_one_device[lenet-mlp]") == \
        _unit(f"{accuracy}::test_a_pipeline_reaches_one_device_at_the_global_batch") == \
        f"{SHARED_GROUP}:{accuracy}"


def test_a_module_on_the_cluster_is_one_group_and_its_local_tests_go_free():
    stragglers = "tests/integration/test_stragglers.py"
    assert _unit(f"{stragglers}::test_async_workers_keep_their_pace_beside_a_straggler") == \
        f"{CLUSTER_GROUP}:{stragglers}"
    # A unit test never touches the cluster, and has no module fixture here.
    assert _unit("tests/unit/test_scheduling.py::"
                 "test_a_module_on_the_cluster_is_one_group_and_its_local_tests_go_free") is None


def test_a_fixture_in_a_class_and_one_reached_through_another(tmp_path):
    (tmp_path / "test_x.py").write_text(textwrap.dedent('''
        import pytest

        @pytest.fixture(scope="module")
        def built():
            return 1

        @pytest.fixture
        def uses(built):
            return built

        def test_through(uses):
            pass

        def test_alone(tmp_path):
            pass

        class TestOnce:
            @pytest.fixture(scope='class')
            def once(self):
                return 2

            def test_a(self, once):
                pass
    '''))
    assert _unit("test_x.py::test_through", tmp_path) == f"{SHARED_GROUP}:test_x.py"
    assert _unit("test_x.py::test_alone", tmp_path) is None
    assert _unit("test_x.py::TestOnce::test_a", tmp_path) == f"{SHARED_GROUP}:test_x.py"
    # A module the reading cannot parse is dealt test by test.
    (tmp_path / "test_y.py").write_text('scope="module"\ndef test_(:\n')
    assert _unit("test_y.py::test_", tmp_path) is None
