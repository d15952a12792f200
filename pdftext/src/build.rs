//! Writes small text-only PDFs: the demo vault's file and test fixtures. Writing only: nothing
//! here parses a PDF.

use lopdf::content::{Content, Operation};
use lopdf::{Document, Object, Stream, StringFormat, dictionary};

/// A document of one US Letter page per entry of `pages`, each line of a page set top down in
/// 12 pt Helvetica (WinAnsiEncoding), one text object per line. Characters outside Latin-1
/// are written as `?`. The trailer carries an `/ID`, which encryption needs.
pub fn text_document(pages: &[&[&str]]) -> Document {
    let mut doc = Document::with_version("1.4");
    // A classic cross-reference table, which every reader knows (PDF 1.4 has no xref streams).
    doc.reference_table.cross_reference_type = lopdf::xref::XrefType::CrossReferenceTable;
    let pages_id = doc.new_object_id();
    let font_id = doc.add_object(dictionary! {
        "Type" => "Font",
        "Subtype" => "Type1",
        "BaseFont" => "Helvetica",
        "Encoding" => "WinAnsiEncoding",
    });
    let resources_id = doc.add_object(dictionary! {
        "Font" => dictionary! { "F1" => font_id },
    });
    let mut kids = Vec::with_capacity(pages.len());
    for lines in pages {
        let mut operations = Vec::with_capacity(lines.len() * 5);
        for (i, line) in lines.iter().enumerate() {
            let y = 720 - 16 * i64::try_from(i).unwrap_or(0);
            operations.extend([
                Operation::new("BT", vec![]),
                Operation::new("Tf", vec!["F1".into(), 12.into()]),
                Operation::new("Td", vec![72.into(), y.into()]),
                Operation::new("Tj", vec![Object::String(latin1(line), StringFormat::Literal)]),
                Operation::new("ET", vec![]),
            ]);
        }
        // Encoding a content of plain operators cannot fail; an empty page is the fallback.
        let content = Content { operations }.encode().unwrap_or_default();
        let content_id = doc.add_object(Stream::new(dictionary! {}, content));
        let page_id = doc.add_object(dictionary! {
            "Type" => "Page",
            "Parent" => pages_id,
            "Contents" => content_id,
        });
        kids.push(Object::Reference(page_id));
    }
    let count = i64::try_from(kids.len()).unwrap_or(i64::MAX);
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {
            "Type" => "Pages",
            "Kids" => kids,
            "Count" => count,
            "Resources" => resources_id,
            "MediaBox" => vec![0.into(), 0.into(), 612.into(), 792.into()],
        }),
    );
    let catalog_id = doc.add_object(dictionary! {
        "Type" => "Catalog",
        "Pages" => pages_id,
    });
    doc.trailer.set("Root", catalog_id);
    doc.trailer.set(
        "ID",
        Object::Array(vec![
            Object::string_literal(b"vaultgate-pdftext".to_vec()),
            Object::string_literal(b"vaultgate-pdftext".to_vec()),
        ]),
    );
    doc
}

/// [`text_document`], saved.
pub fn text_pdf(pages: &[&[&str]]) -> std::io::Result<Vec<u8>> {
    let mut doc = text_document(pages);
    let mut out = Vec::new();
    doc.save_to(&mut out).map_err(std::io::Error::other)?;
    Ok(out)
}

/// The text of the demo vault's `reading/papers/vaultgate-demo.pdf`, page by page, line by
/// line.
pub const DEMO_PAGES: [&[&str]; 2] = [
    &[
        "Attention Is All You Need (demo copy)",
        "Transformers replace recurrence with attention.",
    ],
    &["Page two: the vault keeps the PDF, vaultgate reads its text."],
];

/// WinAnsiEncoding agrees with Latin-1 on ASCII and U+00A0..=U+00FF.
fn latin1(text: &str) -> Vec<u8> {
    text.chars()
        .map(|c| match u32::from(c) {
            n @ (0x20..=0x7e | 0xa0..=0xff) => u8::try_from(n).unwrap_or(b'?'),
            _ => b'?',
        })
        .collect()
}
