"""The cluster's mutual TLS: a Dask scheduler runs whatever Python function a client sends it, on every
worker, outside the sandbox. So nothing may reach the scheduler, a worker or a nanny without a
certificate of the cluster's own CA: `grade cluster-certs DIR` makes that CA and one certificate per role,
`grade scheduler --certs DIR` starts Dask's scheduler requiring them, and `grade worker`, `grade batch
--cluster` and `grade serve --cluster` refuse a plain tcp:// scheduler unless told --insecure.

Each certificate names its role (a URI in its subject alternative names, `urn:sgemm-grader:role:worker`),
and the servers answer each peer only as its role allows (cluster_preload.py): a worker's or the
scheduler's key cannot submit tasks or run functions. Each command checks it was given its own role's
certificate, and says which it was given otherwise.
"""
from __future__ import annotations

import datetime
import os
import socket
from pathlib import Path

from ..errors import UsageError

CA = "ca.pem"
CLIENT, WORKER, SCHEDULER = "client", "worker", "scheduler"
ROLES = (SCHEDULER, WORKER, CLIENT)  # who holds which certificate; a client is `grade batch`/`serve`
ROLE_URI = "urn:sgemm-grader:role:"  # + the role: a subject alternative name of each certificate
# preloaded by the scheduler, each nanny and each worker of a TLS cluster
ROLE_GATE = "grader.classroom.cluster_preload"
DEFAULT_DAYS = 400  # a term and its regrades, with room to spare
HOW = ("`grade cluster-certs DIR` makes the certificates and `grade scheduler --certs DIR` starts a scheduler "
       "that requires them; then pass tls://HOST:8786 and --certs DIR")


def cert_file(folder: Path, role: str) -> Path:
    return folder / f"{role}.pem"


def key_file(folder: Path, role: str) -> Path:
    return folder / f"{role}-key.pem"


def make_certificates(folder: Path, days: int = DEFAULT_DAYS, hosts: tuple[str, ...] = ()) -> list[Path]:
    """A fresh CA and a certificate and key for each role, in `folder` (made mode 700; keys mode 600). The
    CA's key is not kept: nobody can sign another certificate for this cluster, and a new cluster (or a
    renewal) is a new folder. Refuses to overwrite, so an existing cluster's certificates are never lost."""
    targets = [folder / CA] + [f(folder, role) for role in ROLES for f in (cert_file, key_file)]
    if existing := [str(p) for p in targets if p.exists()]:
        raise UsageError(f"{', '.join(existing)}: already there; make a new cluster's certificates in a new folder")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, ca_cert = _ca(now, days)
    _write(folder / CA, _pem(ca_cert), 0o644)
    for role in ROLES:
        key, cert = _leaf(role, ca_key, ca_cert, now, days, hosts)
        _write(key_file(folder, role), _key_pem(key), 0o600)
        _write(cert_file(folder, role), _pem(cert), 0o644)
    return targets


def _ca(now, days: int):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"sgemm-grader cluster CA ({socket.gethostname()}, "
                                                               f"{now:%Y-%m-%d})")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(role: str, ca_key, ca_cert, now, days: int, hosts: tuple[str, ...]):
    """Every role both listens and connects (the scheduler dials workers, workers dial each other), so each
    certificate is good for TLS servers and clients. Dask checks the CA, not host names (it expects IP
    addresses), so the names are for people reading the certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.UniformResourceIdentifier(role_uri(role)), x509.DNSName(f"sgemm-grader-{role}"),
             *(x509.DNSName(h) for h in hosts)]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"sgemm-grader {role}")]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=True, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return key, cert


def role_uri(role: str) -> str:
    return ROLE_URI + role


def roles_in(names: list[tuple[str, str]]) -> list[str]:
    """The roles among subject alternative names, as Python's ssl lists them: [("URI", "urn:..."), ...]."""
    return [value[len(ROLE_URI):] for kind, value in names if kind == "URI" and value.startswith(ROLE_URI)]


def certificate_roles(path: Path) -> list[str]:
    """The roles a certificate file names."""
    from cryptography import x509

    try:
        certificate = x509.load_pem_x509_certificate(path.read_bytes())
    except ValueError as error:
        raise UsageError(f"{path}: not a PEM certificate ({error})") from None
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return roles_in([("URI", uri) for uri in names.get_values_for_type(x509.UniformResourceIdentifier)])


def _check_role(path: Path, role: str) -> None:
    """The certificate a command was given is its role's: a worker's key as a client is refused by the
    scheduler anyway, and this says why before anything is tried."""
    found = certificate_roles(path)
    if found == [role]:
        return
    if not found:
        raise UsageError(f"{path}: this certificate names no role (it was made before certificates carried one); "
                         f"make the cluster's certificates again with `grade cluster-certs DIR` and copy each "
                         "host its part")
    raise UsageError(f"{path}: this is a {' and '.join(found)}'s certificate, not a {role}'s: give this command "
                     f"{role}.pem and {role}-key.pem")


def _pem(cert) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding

    return cert.public_bytes(Encoding.PEM)


def _key_pem(key) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())


def _write(path: Path, data: bytes, mode: int) -> None:
    """Created with its final mode (never readable by others, not even for a moment), never over a file."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
    os.chmod(path, mode)  # the umask may have taken bits a certificate should have


# --- which files a command uses, and whether it may talk to the scheduler at all ---------------------------


def tls_files(role: str, certs: Path | None, ca_file: Path | None, cert: Path | None,
              key: Path | None) -> tuple[Path, Path, Path] | None:
    """(CA, certificate, key) for `role` from --certs DIR or the three --tls-* files; None when none given."""
    if certs and (ca_file or cert or key):
        raise UsageError("give either --certs DIR or the --tls-* files, not both")
    if certs:
        files = (certs / CA, cert_file(certs, role), key_file(certs, role))
    elif ca_file or cert or key:
        if not (ca_file and cert and key):
            raise UsageError("TLS needs all three: --tls-ca-file, --tls-cert and --tls-key")
        files = (ca_file, cert, key)
    else:
        return None
    for path in files:
        if not os.access(path, os.R_OK):
            raise UsageError(f"{path}: cannot read it ({'missing' if not path.exists() else 'permission denied'}); "
                             f"{HOW}")
    _check_role(files[1], role)
    return files


def scheme(address: str) -> str:
    return address.split("://", 1)[0].lower() if "://" in address else "tcp"  # Dask's default is tcp


def checked_files(address: str, role: str, certs: Path | None, ca_file: Path | None, cert: Path | None,
                  key: Path | None, insecure: bool, flag: str) -> tuple[Path, Path, Path] | None:
    """The TLS files to reach the scheduler at `address` with, or None for plain TCP, which only --insecure
    allows: a plain-TCP scheduler runs any code anyone who reaches it sends."""
    files = tls_files(role, certs, ca_file, cert, key)
    kind = scheme(address)
    if kind == "tls":
        if insecure:
            raise UsageError(f"{flag} {address}: --insecure is for a plain tcp:// scheduler; a tls:// one needs "
                             "--certs DIR")
        if files is None:
            raise UsageError(f"{flag} {address}: a tls:// scheduler needs this host's certificates: --certs DIR "
                             f"(or --tls-ca-file, --tls-cert and --tls-key). {HOW}")
        return files
    if kind != "tcp":
        raise UsageError(f"{flag} {address}: use a tls://HOST:PORT scheduler (or tcp:// with --insecure)")
    if files is not None:
        raise UsageError(f"{flag} {address}: certificates were given but the address is plain TCP; write it "
                         "tls://HOST:PORT and start the scheduler with `grade scheduler --certs DIR`")
    if not insecure:
        raise UsageError(f"{flag} {address}: refusing a plain-TCP Dask scheduler: anyone who reaches its port can "
                         f"run code on every worker, unauthenticated. Use TLS: {HOW}. (--insecure allows plain "
                         "TCP, for a network nobody else can reach.)")
    return None


def client_security(address: str, certs: Path | None, ca_file: Path | None, cert: Path | None, key: Path | None,
                    insecure: bool):
    """Dask's `Security` for `grade batch --cluster` and `grade serve --cluster` (the client's certificate),
    or None for a plain-TCP scheduler that --insecure allowed."""
    files = checked_files(address, "client", certs, ca_file, cert, key, insecure, "--cluster")
    if files is None:
        return None
    from distributed.security import Security

    ca, cert_path, key_path = map(str, files)
    return Security(tls_ca_file=ca, tls_client_cert=cert_path, tls_client_key=key_path, require_encryption=True)
