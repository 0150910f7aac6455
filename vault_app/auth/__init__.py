"""Access control: who is calling (a validated principal) and what it may do on which stream.

Modules, each with one job (design: docs/SECURITY.md):

* :mod:`.identity`: the :class:`~.identity.Principal` every credential turns into;
* :mod:`.policy`: pure rules, principal + action + stream -> allow or deny;
* :mod:`.tokens`: Entra ID (OpenID Connect) bearer token validation, with a signing key cache;
* :mod:`.principal`: the credential of a request (bearer token, function key, Easy Auth) -> principal.

Pure: it knows nothing of the app's settings, services or handlers. The one place in the request
path where the check happens, :mod:`vault_app.guard`, sits above them and uses this package.
"""
