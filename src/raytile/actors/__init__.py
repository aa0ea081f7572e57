"""Ray actors: the worker pool (``RayExecutor``), the coordinator actor and their replies.

Importing this package registers Ray's run hosts with the runtime layer (strings, resolved on first
use, so Ray is imported only when a Context uses it): ``Context(executor="ray")`` coordinates in the
driver with a :class:`~raytile.actors.executor.RayExecutor`, ``coordinator="actor"`` in a
:class:`~raytile.actors.coordinator_actor.CoordinatorActor` (:class:`~raytile.actors.actor_host.ActorHost`).
"""

from raytile.runtime.host_factories import register_host_factory

register_host_factory("ray", "driver", "raytile.actors.executor:RayExecutor.make")
register_host_factory("ray", "actor", "raytile.actors.actor_host:ActorHost.make")
