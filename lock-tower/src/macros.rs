//! Code every service of the crate repeats, written once.

/// `get_ref`, `get_mut` and `into_inner` of a service whose inner service is its field
/// `inner` (tower-http's `define_inner_service_accessors!`).
macro_rules! inner_service_accessors {
    () => {
        /// The inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// The inner service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// Consumes `self`, returning the inner service.
        pub fn into_inner(self) -> S {
            self.inner
        }
    };
}

pub(crate) use inner_service_accessors;

/// The impls every layer and service of the crate has: `Clone` and `Debug` of a layer
/// (`layer Name => Service, key_field`, with its tower `Layer` impl making
/// `Service::new(inner, key, settings, on_rejection)`) or a service (`service Name,
/// key_field`, with its `inner` service) whose key extractor (`key_field: Arc<K>`) and
/// rejection handler (`on_rejection: Arc<R>`) sit behind `Arc`s: neither needs to be `Clone`
/// (only a service's inner service does), and `Debug` shows their type names.
macro_rules! common_impls {
    (layer $name:ident => $service:ident, $key:ident) => {
        impl<S, K, R> tower::Layer<S> for $name<K, R> {
            type Service = $service<S, K, R>;

            fn layer(&self, inner: S) -> Self::Service {
                $service::new(
                    inner,
                    self.$key.clone(),
                    std::sync::Arc::new(self.settings.clone()),
                    self.on_rejection.clone(),
                )
            }
        }

        impl<K, R> Clone for $name<K, R> {
            fn clone(&self) -> Self {
                Self {
                    $key: self.$key.clone(),
                    settings: self.settings.clone(),
                    on_rejection: self.on_rejection.clone(),
                }
            }
        }

        impl<K, R> std::fmt::Debug for $name<K, R> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field(stringify!($key), &std::any::type_name::<K>())
                    .field("settings", &self.settings)
                    .field("on_rejection", &std::any::type_name::<R>())
                    .finish()
            }
        }
    };
    (service $name:ident, $key:ident) => {
        impl<S: Clone, K, R> Clone for $name<S, K, R> {
            fn clone(&self) -> Self {
                Self {
                    inner: self.inner.clone(),
                    $key: self.$key.clone(),
                    settings: self.settings.clone(),
                    on_rejection: self.on_rejection.clone(),
                }
            }
        }

        impl<S: std::fmt::Debug, K, R> std::fmt::Debug for $name<S, K, R> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("inner", &self.inner)
                    .field(stringify!($key), &std::any::type_name::<K>())
                    .field("settings", &self.settings)
                    .field("on_rejection", &std::any::type_name::<R>())
                    .finish()
            }
        }
    };
}

pub(crate) use common_impls;
