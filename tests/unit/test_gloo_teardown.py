"""The relaunch helper the multi-process tests use: a launch that ends in gloo's teardown abort is
started again from the state it started in, and no more than LAUNCHES times."""

from gloo_teardown import LAUNCHES, relaunched


def test_a_relaunch_starts_from_the_folder_as_it_was(tmp_path):
    (tmp_path / "config.txt").write_text("original")
    seen = []

    def launch():
        seen.append(sorted((path.name, path.read_text()) for path in tmp_path.rglob("*") if path.is_file()))
        (tmp_path / "snapshot.pt").write_text("epoch 2")
        (tmp_path / "config.txt").write_text("changed")
        return len(seen)

    assert relaunched(launch, lambda launches: launches < 2, folder=tmp_path) == 2
    assert seen == [[("config.txt", "original")]] * 2


def test_a_launch_that_always_aborts_is_tried_launches_times_and_its_outcome_returned():
    count = []
    assert relaunched(lambda: count.append(1) or "aborted", lambda outcome: True) == "aborted"
    assert len(count) == LAUNCHES
