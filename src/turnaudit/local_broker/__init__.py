"""The project-local KRaft Apache Kafka cluster, run from jars Maven resolved.

Used by ``make demo``, the tests and ``turnaudit broker``. Its data, config,
logs and pid files live under one project-local folder; it binds 127.0.0.1
only. One node by default (its files right in the folder); three with
``nodes=3`` (``node-1/``, ``node-2/``, ``node-3/``, each a combined broker and
controller with its own ports, pid and log). With ``security="sasl_ssl"`` its
client listener speaks SASL/SCRAM-SHA-512 over TLS: a CA and a broker
certificate are made with the JDK's keytool at first start (``tls/``), every
principal's password is drawn then (``secrets/<user>.password``, mode 0600); the
admin's credential is added to the metadata at format time, every other one by
the admin through the AdminClient once the cluster serves, and no password is
ever on a command line. The KRaft StandardAuthorizer lets only the ``admin``
super user do what no ACL allows. The folder is its owner's alone (0700) and
the nodes run with umask 077.
"""

from turnaudit.local_broker.broker import LocalKafkaBroker
from turnaudit.local_broker.config import LAYOUT_FILE, saved_layout
from turnaudit.local_broker.credentials import LOCAL_SUBSCRIBERS
from turnaudit.local_broker.jvm import require_tool
from turnaudit.local_broker.nodes import free_port, free_ports
from turnaudit.local_broker.settings import LocalBrokerSettings
from turnaudit.local_broker.status import BrokerStatus, NodeStatus

__all__ = [
    "LAYOUT_FILE",
    "LOCAL_SUBSCRIBERS",
    "BrokerStatus",
    "LocalBrokerSettings",
    "LocalKafkaBroker",
    "NodeStatus",
    "free_port",
    "free_ports",
    "require_tool",
    "saved_layout",
]
