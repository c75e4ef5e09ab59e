//! x509 key pairs as Nova's `nova.crypto` makes and reads them, with
//! OpenSSL (the library every build links): a generated pair is Nova's
//! WinRM client certificate (`generate_winrm_x509_cert`: RSA 2048,
//! self-signed, subject `CN=<user id>`, 3650 days, extended key usage
//! `clientAuth`, a subject alternative name `otherName` UPN
//! `<user id>@localhost`), the private key a base64 PKCS#12 bundle
//! without a password; the fingerprint is the SHA-1 of the certificate's
//! DER as colon-separated hex.

use base64::Engine;
use openssl::asn1::{Asn1Integer, Asn1Object, Asn1Time};
use openssl::bn::{BigNum, MsbOption};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkcs12::Pkcs12;
use openssl::pkey::PKey;
use openssl::rsa::Rsa;
use openssl::x509::extension::{ExtendedKeyUsage, SubjectAlternativeName};
use openssl::x509::{X509Builder, X509NameBuilder, X509};

use super::keypairs::colon_hex;

/// Microsoft's User Principal Name `otherName`.
const UPN_OID: &str = "1.3.6.1.4.1.311.20.2.3";

/// A generated x509 key pair.
pub struct Generated {
    /// The PKCS#12 bundle (key and certificate), base64, no password.
    pub private_key: String,
    /// The certificate, PEM.
    pub certificate: String,
    /// Its fingerprint.
    pub fingerprint: String,
}

/// The fingerprint of a PEM certificate; `Err` holds the reason Nova's
/// message gives after `Error message:` (the wording of the Python
/// `cryptography` library's refusals where it can be told apart).
pub fn fingerprint(pem: &str) -> Result<String, String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    if !pem.contains("-----BEGIN ") {
        return Err("Unable to load PEM file. See \
                    https://cryptography.io/en/latest/faq/#why-can-t-i-import-my-pem-file \
                    for more details. MalformedFraming"
            .into());
    }
    if !pem.contains(BEGIN) {
        return Err(
            "Valid PEM but no BEGIN CERTIFICATE/END CERTIFICATE delimiters. \
                    Are you sure this is a certificate?"
                .into(),
        );
    }
    let cert = X509::from_pem(pem.as_bytes()).map_err(|_| "error parsing asn1 value".to_owned())?;
    let digest = cert
        .digest(MessageDigest::sha1())
        .map_err(|e| e.to_string())?;
    Ok(colon_hex(&digest))
}

/// DER of a UTF8String.
fn utf8_string_der(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = vec![0x0c];
    let n = bytes.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let len: Vec<u8> = n
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | len.len() as u8);
        out.extend(len);
    }
    out.extend_from_slice(bytes);
    out
}

/// A fresh key pair for `user_id`, as Nova's `generate_winrm_x509_cert`
/// (slow: an RSA key; call it off the async threads).
pub fn generate(user_id: &str) -> Result<Generated, openssl::error::ErrorStack> {
    let key = PKey::from_rsa(Rsa::generate(2048)?)?;
    let mut name = X509NameBuilder::new()?;
    name.append_entry_by_nid(Nid::COMMONNAME, user_id)?;
    let name = name.build();
    let mut b = X509Builder::new()?;
    b.set_version(2)?;
    let mut serial = BigNum::new()?;
    serial.rand(159, MsbOption::MAYBE_ZERO, false)?;
    b.set_serial_number(Asn1Integer::from_bn(&serial)?.as_ref())?;
    b.set_subject_name(&name)?;
    b.set_issuer_name(&name)?;
    b.set_pubkey(&key)?;
    b.set_not_before(Asn1Time::days_from_now(0)?.as_ref())?;
    b.set_not_after(Asn1Time::days_from_now(3650)?.as_ref())?;
    b.append_extension(ExtendedKeyUsage::new().client_auth().build()?)?;
    let upn = utf8_string_der(&format!("{user_id}@localhost"));
    let san = SubjectAlternativeName::new()
        .other_name2(Asn1Object::from_str(UPN_OID)?, &upn)
        .build(&b.x509v3_context(None, None))?;
    b.append_extension(san)?;
    b.sign(&key, MessageDigest::sha256())?;
    let cert = b.build();
    let bundle = Pkcs12::builder().pkey(&key).cert(&cert).build2("")?;
    let certificate = String::from_utf8_lossy(&cert.to_pem()?).into_owned();
    Ok(Generated {
        private_key: base64::engine::general_purpose::STANDARD.encode(bundle.to_der()?),
        fingerprint: colon_hex(&cert.digest(MessageDigest::sha1())?),
        certificate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Made with `openssl req -x509`; fingerprint from `openssl x509
    /// -fingerprint -sha1`.
    const CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBbDCCAROgAwIBAgIUTZx3Rsf4Hoz/EjEZ28e6L4IvBmswCgYIKoZIzj0EAwIw
DDEKMAgGA1UEAwwBdDAeFw0yNjExMjkyMDIxMDFaFw0zNjExMjYyMDIxMDFaMAwx
CjAIBgNVBAMMAXQwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAASNUM1HhYeJM6He
fFQqb+jYUNDrkrlaGqwQmJ4/2TwhHZ5Kfm75W/D3Aqyq4EYpphYGyd/ZN2c5q8l5
yeZYU7mfo1MwUTAdBgNVHQ4EFgQUc0jwBmTA5o5pbdp1o/SIeRgIfQ8wHwYDVR0j
BBgwFoAUc0jwBmTA5o5pbdp1o/SIeRgIfQ8wDwYDVR0TAQH/BAUwAwEB/zAKBggq
hkjOPQQDAgNHADBEAiA7UqbZ27JVi6c0R6X1oRMnVnwGqT6EvKVY40PnbqeMMwIg
BVoYCslXeZuYkVHm5WSMXAq5z4Q8ySIv3GeTDmWwZEM=
-----END CERTIFICATE-----";

    #[test]
    fn fingerprints_match_openssl() {
        assert_eq!(
            fingerprint(CERT).unwrap(),
            "96:8a:3b:8b:1c:f2:23:b6:a9:33:43:22:33:16:71:be:f1:00:5e:3e"
        );
        assert!(fingerprint("").unwrap_err().ends_with("MalformedFraming"));
        assert!(
            fingerprint("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----")
                .unwrap_err()
                .starts_with("Valid PEM but no BEGIN CERTIFICATE")
        );
        assert_eq!(
            fingerprint("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----")
                .unwrap_err(),
            "error parsing asn1 value"
        );
    }

    #[test]
    fn generated_pairs_are_nova_s_winrm_certificates() {
        let g = generate("u1").unwrap();
        assert_eq!(fingerprint(&g.certificate).unwrap(), g.fingerprint);
        let cert = X509::from_pem(g.certificate.as_bytes()).unwrap();
        let cn = cert
            .subject_name()
            .entries_by_nid(Nid::COMMONNAME)
            .next()
            .unwrap();
        assert_eq!(cn.data().to_string().unwrap(), "u1");
        let der = base64::engine::general_purpose::STANDARD
            .decode(&g.private_key)
            .unwrap();
        let parsed = Pkcs12::from_der(&der).unwrap().parse2("").unwrap();
        assert_eq!(
            parsed
                .cert
                .unwrap()
                .digest(MessageDigest::sha1())
                .unwrap()
                .to_vec(),
            cert.digest(MessageDigest::sha1()).unwrap().to_vec()
        );
        assert!(parsed.pkey.is_some());
        // The UPN names the user at localhost.
        let text = String::from_utf8_lossy(&cert.to_text().unwrap()).into_owned();
        assert!(text.contains("TLS Web Client Authentication"), "{text}");
        assert_eq!(utf8_string_der("ab"), [0x0c, 2, b'a', b'b']);
        assert_eq!(&utf8_string_der(&"x".repeat(200))[..3], [0x0c, 0x81, 200]);
    }
}
