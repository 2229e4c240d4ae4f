"""The runner-side gate service: the runner key out of every job's reach (docs/service.md).

A job on the runner asks the service, over a Unix socket, to gate one commit; the service, as its
own system user, fetches the pinned head into a private folder, reads the trusted config from the
tip of its trusted branch (never from a commit or path the caller names), runs ``ds4ci gate``
itself (the build and the servers in the sandbox), signs with a key only it can read and streams
the bundle and results back. There is no verb that signs bytes.

- ``protocol``: length-prefixed JSON frames, each read capped; the request's validation;
- ``queue``: one first-come queue per runner (GPU), bounded, never cancelling a waiting request;
- ``checkout``: the private checkout of the head and the trusted branch tip's config;
- ``job``: one gate run as a child process, its outputs collected, its request recorded;
- ``server``: the socket, peer credentials, one thread per connection;
- ``client``: ``ds4ci service request``, the answers mapped to the gate's exit codes;
- ``install``: the systemd units, tmpfiles entry and the key's folder.
"""
