//! What a build tells the compute about the guest beyond its resources:
//! the instance's own data, which the compute hands to the guest (Nova's
//! config drive, `openstack/latest/meta_data.json` and `user_data`).

/// The guest's view of its instance, carried by `build_and_run_instance`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct GuestData {
    /// `display_name`.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The guest's hostname.
    #[prost(string, tag = "2")]
    pub hostname: String,
    /// Availability zone (empty: none asked).
    #[prost(string, tag = "3")]
    pub availability_zone: String,
    /// Index in its create request.
    #[prost(int64, tag = "4")]
    pub launch_index: i64,
    /// Metadata given at create (key, value), sorted by key.
    #[prost(map = "string, string", tag = "5")]
    pub metadata: ::std::collections::HashMap<String, String>,
    /// `user_data` as given at create (base64); empty: none.
    #[prost(string, tag = "6")]
    pub user_data: String,
    /// The key pair named at create, if any.
    #[prost(message, optional, tag = "7")]
    pub key: Option<GuestKey>,
    /// Whether the guest gets a config drive (asked at create, or the
    /// image's `img_config_drive=mandatory`).
    #[prost(bool, tag = "8")]
    pub config_drive: bool,
}

/// A key pair as the guest sees it.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct GuestKey {
    /// Its name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// `ssh` or `x509`.
    #[prost(string, tag = "2")]
    pub kind: String,
    /// The public key.
    #[prost(string, tag = "3")]
    pub public_key: String,
}
