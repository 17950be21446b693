//! TensorBoard logger: event files (TFRecord-framed `tensorflow.Event`
//! protobufs) written without TensorFlow or a protobuf library, readable by
//! TensorBoard's scalars, hparams, images, histograms and text dashboards.
pub mod crc32c;
pub mod logger;
pub mod media;
pub mod png;
pub mod proto;
pub mod record;
pub mod summary;
pub mod writer;

#[cfg(test)]
mod tests;

pub use logger::TensorBoardLogger;
pub use media::Media;
pub use writer::EventWriter;
