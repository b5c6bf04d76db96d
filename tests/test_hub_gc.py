"""The load process takes its start-up objects out of the cyclic collector's passes at a test's start."""

import gc


def test_a_test_start_freezes_what_exists_and_leaves_later_objects_collectable():
    from locust.env import Environment

    from llm_locust.runtime.hub import install

    env = Environment()
    env.create_local_runner()
    install(env)
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        env.events.test_start.fire(environment=env)
        frozen = gc.get_freeze_count()
        assert frozen > 1000  # modules, Locust, this test's objects: everything alive at the start

        class Cycle:
            pass

        a, b = Cycle(), Cycle()
        a.other, b.other = b, a  # made after the start: garbage the collector must still find
        del a, b
        assert gc.collect() >= 2
        assert gc.get_freeze_count() == frozen
    finally:
        env.events.test_stop.fire(environment=env)
        gc.unfreeze()
