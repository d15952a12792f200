//! Deterministic synthetic vaults: YAML frontmatter (title, aliases, tags, dates), wiki links to
//! other notes, paragraphs of English and Chinese text, and planted words at known frequencies so
//! every benchmark query has a known selectivity.
//!
//! Everything derives from `(seed, note index)` through a hash, so a note can be generated (or
//! linked to) without generating the others, and the same seed always gives the same bytes.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Notes per folder (`topic-000/`, `topic-001/`, …).
const PER_FOLDER: usize = 100;

/// A word planted in a known share of notes, never produced by the vocabularies below.
pub struct Planted {
    pub word: &'static str,
    /// Share of notes that contain it (the rare word is planted in exactly `RARE_NOTES` notes instead).
    pub share: f64,
}

/// Planted in exactly this many notes, whatever the vault size.
pub const RARE_NOTES: usize = 10;
pub const RARE: &str = "zephyrquartz";
pub const COMMON: Planted = Planted {
    word: "lighthouse",
    share: 0.25,
};
pub const COMMON2: Planted = Planted {
    word: "orchard",
    share: 0.30,
};
pub const COMMON3: Planted = Planted {
    word: "lantern",
    share: 0.40,
};
pub const CJK: Planted = Planted {
    word: "量子纠缠",
    share: 0.01,
};
/// A title word (and its CJK alias) for `search_knowledge`.
pub const TITLE_WORD: Planted = Planted {
    word: "Borealis",
    share: 0.005,
};
pub const TITLE_ALIAS: &str = "北极光";

/// A content query of the benchmark: its text and what it exercises.
#[derive(Clone, Debug)]
pub struct Query {
    pub key: &'static str,
    pub text: String,
    pub what: &'static str,
}

/// The `search_note_content` queries (the same ones ripgrep runs).
/// Authors and read states of the typed frontmatter (`query_notes`).
pub const AUTHORS: &[&str] = &[
    "Vaswani",
    "Shazeer",
    "Parmar",
    "Uszkoreit",
    "Jones",
    "Gomez",
    "Kaiser",
    "Polosukhin",
    "Bahdanau",
    "Cho",
    "Bengio",
    "Hinton",
    "LeCun",
    "Sutskever",
    "Graves",
    "Schmidhuber",
    "Hochreiter",
];
pub const STATUS: &[&str] = &["read", "queue", "reading", "skimmed"];

pub fn content_queries() -> Vec<Query> {
    vec![
        Query {
            key: "rare-1",
            text: RARE.to_owned(),
            what: "one rare term",
        },
        Query {
            key: "common-1",
            text: COMMON.word.to_owned(),
            what: "one common term",
        },
        Query {
            key: "rare-3",
            text: format!("{RARE} {} {}", COMMON.word, COMMON2.word),
            what: "three terms, rare AND",
        },
        Query {
            key: "common-3",
            text: format!("{} {} {}", COMMON.word, COMMON2.word, COMMON3.word),
            what: "three common terms",
        },
        Query {
            key: "cjk",
            text: CJK.word.to_owned(),
            what: "CJK term",
        },
    ]
}

/// The `search_knowledge` queries (title/alias/tag metadata).
pub fn knowledge_queries() -> Vec<Query> {
    vec![
        Query {
            key: "title",
            text: TITLE_WORD.word.to_lowercase(),
            what: "title word",
        },
        Query {
            key: "alias-cjk",
            text: TITLE_ALIAS.to_owned(),
            what: "CJK alias",
        },
    ]
}

#[rustfmt::skip]
const EN: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be", "by",
    "this", "are", "from", "at", "or", "an", "which", "not", "we", "can", "have", "has", "more", "one",
    "all", "their", "also", "when", "there", "model", "system", "data", "time", "state", "value", "memory",
    "graph", "network", "function", "process", "theory", "method", "result", "attention", "signal",
    "energy", "structure", "pattern", "language", "learning", "knowledge", "question", "answer", "problem",
    "example", "design", "history", "culture", "market", "city", "river", "mountain", "forest", "garden",
    "kitchen", "recipe", "bread", "coffee", "music", "rhythm", "melody", "painting", "color", "light",
    "shadow", "paper", "book", "chapter", "reading", "writing", "draft", "review", "project", "meeting",
    "plan", "goal", "habit", "practice", "exercise", "sleep", "health", "body", "mind", "focus", "idea",
    "concept", "principle", "argument", "evidence", "source", "citation", "quote", "summary", "outline",
    "index", "archive", "tag", "link", "note", "vault", "folder", "file", "journal", "daily", "weekly",
    "monthly", "quarter", "season", "winter", "spring", "summer", "autumn", "morning", "evening", "night",
    "travel", "train", "station", "bridge", "harbor", "island", "ocean", "wave", "wind", "storm", "cloud",
    "rain", "snow", "stone", "metal", "glass", "wood", "fire", "water", "earth", "planet", "orbit",
    "gravity", "quantum", "particle", "field", "vector", "matrix", "tensor", "gradient", "softmax",
    "transformer", "encoder", "decoder", "token", "sequence", "layer", "weight", "bias", "loss", "training",
    "inference", "benchmark", "latency", "throughput", "cache", "buffer", "queue", "stack", "tree", "hash",
    "table", "query", "search", "filter", "sort", "merge", "split", "join", "parse", "compile", "execute",
    "debug", "test", "deploy", "release", "version", "branch", "commit", "patch", "diff", "history", "undo",
    "redo", "careful", "quick", "slow", "simple", "complex", "small", "large", "early", "late", "new",
    "old", "good", "better", "best", "clear", "open", "closed", "public", "private", "local", "global",
    "first", "second", "third", "last", "next", "between", "through", "under", "over", "about", "because",
    "although", "however", "therefore", "often", "rarely", "always", "never", "maybe", "perhaps", "really",
    "quite", "very", "much", "many", "few",
];

/// Two-character Chinese words; none of them, alone or next to another, spells a planted CJK word.
#[rustfmt::skip]
const ZH: &[&str] = &[
    "学习", "知识", "笔记", "方法", "问题", "答案", "模型", "系统", "数据", "时间", "记忆", "网络", "函数", "过程", "理论", "结果", "注意",
    "信号", "能量", "结构", "模式", "语言", "例子", "设计", "历史", "文化", "市场", "城市", "河流", "山脉", "森林", "花园", "厨房", "面包",
    "咖啡", "音乐", "节奏", "旋律", "绘画", "颜色", "光线", "阴影", "纸张", "书籍", "章节", "阅读", "写作", "草稿", "评论", "项目", "会议",
    "计划", "目标", "习惯", "练习", "睡眠", "健康", "身体", "思想", "专注", "想法", "概念", "原则", "论证", "证据", "来源", "引用", "摘要",
    "大纲", "索引", "档案", "标签", "链接", "文件", "日记", "每天", "每周", "季节", "冬天", "春天", "夏天", "秋天", "早晨", "晚上", "旅行",
    "火车", "车站", "桥梁", "港口", "岛屿", "海洋", "风暴", "云朵", "石头", "金属", "玻璃", "木头", "火焰", "地球", "行星", "轨道", "引力",
    "粒子", "向量", "矩阵", "梯度", "训练", "推理", "缓存", "队列", "查询", "搜索", "排序", "合并", "版本", "分支", "简单", "复杂", "重要",
    "清楚", "因为", "所以", "但是", "然后", "我们", "他们", "这个", "那个", "一些", "很多",
];

#[rustfmt::skip]
const TAGS: &[&str] = &[
    "area/physics", "area/ml", "area/cooking", "area/music", "area/history", "area/travel", "area/health",
    "area/reading", "area/writing", "area/code", "status/draft", "status/review", "status/done",
    "status/evergreen", "type/moc", "type/literature", "type/permanent", "type/fleeting", "type/project",
    "type/person", "project-1", "project-2", "project-3", "project-4", "project-5", "project-6",
    "project-7", "project-8", "project-9", "idea", "question", "todo", "reference", "quote", "summary",
    "lecture", "paper", "book", "podcast", "video", "学习", "读书", "笔记", "研究", "生活", "工作",
];

/// SplitMix64: a tiny, well-mixed deterministic generator (no dependency, same on every machine).
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator for `(seed, index, salt)`: independent streams per note and per purpose.
    pub fn for_note(seed: u64, index: usize, salt: u64) -> Rng {
        let mut r = Rng(seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt.rotate_left(17));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }

    /// Uniform in [lo, hi].
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// Skewed toward the start of the list, as word frequencies are (roughly Zipf-like).
    fn skewed(&mut self, n: usize) -> usize {
        let u = self.unit();
        ((u * u * u) * n as f64) as usize % n
    }
}

/// What one note holds, for the manifest's exact counts.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Presence {
    pub rare: bool,
    pub common: bool,
    pub common2: bool,
    pub common3: bool,
    pub cjk: bool,
    pub title_word: bool,
}

/// Salts for the independent per-note decisions.
const S_TITLE: u64 = 1;
const S_PLANT: u64 = 2;
const S_BODY: u64 = 3;

/// A generated vault's description: sizes and how many notes hold each planted word.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub notes: usize,
    pub seed: u64,
    pub bytes: u64,
    /// query key → number of notes that match it (every term present).
    pub matching_notes: BTreeMap<String, usize>,
    pub generate_secs: f64,
}

pub struct Generator {
    pub n: usize,
    pub seed: u64,
}

impl Generator {
    pub fn new(n: usize, seed: u64) -> Generator {
        Generator { n, seed }
    }

    fn title_words(&self, i: usize) -> (Vec<&'static str>, bool) {
        let mut r = Rng::for_note(self.seed, i, S_TITLE);
        let k = r.range(2, 3);
        let mut words: Vec<&'static str> = (0..k).map(|_| EN[34 + r.below(EN.len() - 34)]).collect();
        let borealis = r.unit() < TITLE_WORD.share;
        if borealis {
            words.push(TITLE_WORD.word);
        }
        (words, borealis)
    }

    pub fn title(&self, i: usize) -> String {
        let (words, _) = self.title_words(i);
        let mut t: Vec<String> = words.iter().map(|w| capitalize(w)).collect();
        t.push(format!("{i:06}"));
        t.join(" ")
    }

    /// The vault-relative path of note `i`: `topic-NNN/<slug>-NNNNNN.md`.
    pub fn path(&self, i: usize) -> String {
        format!("topic-{:03}/{}.md", i / PER_FOLDER, self.stem(i))
    }

    /// The file stem, which is what a wiki link names.
    pub fn stem(&self, i: usize) -> String {
        let (words, _) = self.title_words(i);
        format!("{}-{i:06}", words.join("-").to_lowercase())
    }

    /// Which planted words note `i` holds.
    pub fn presence(&self, i: usize) -> Presence {
        let mut r = Rng::for_note(self.seed, i, S_PLANT);
        let stride = (self.n / RARE_NOTES).max(1);
        let rare = i % stride == stride / 2 && i / stride < RARE_NOTES;
        let (_, title_word) = self.title_words(i);
        Presence {
            rare,
            common: r.unit() < COMMON.share || rare,
            common2: r.unit() < COMMON2.share || rare,
            common3: r.unit() < COMMON3.share,
            cjk: r.unit() < CJK.share,
            title_word,
        }
    }

    /// The full text of note `i`.
    pub fn note(&self, i: usize) -> String {
        self.note_with(i, self.presence(i))
    }

    /// A note like note `i` holding none of the planted words (for notes the benchmark writes).
    pub fn plain_note(&self, i: usize) -> String {
        self.note_with(i, Presence::default())
    }

    fn note_with(&self, i: usize, p: Presence) -> String {
        let mut r = Rng::for_note(self.seed, i, S_BODY);
        let title = self.title(i);
        let mut s = String::with_capacity(3072);
        s.push_str("---\n");
        s.push_str(&format!("title: {title}\n"));
        s.push_str("aliases:\n");
        let initials: String = title
            .split(' ')
            .filter_map(|w| w.chars().next())
            .filter(|c| c.is_alphabetic())
            .collect();
        s.push_str(&format!("  - {initials}-{i:06}\n"));
        if p.title_word {
            s.push_str(&format!("  - {TITLE_ALIAS} {i:06}\n"));
        } else if r.unit() < 0.3 {
            s.push_str(&format!("  - {}{} {i:06}\n", pick(&mut r, ZH), pick(&mut r, ZH)));
        }
        s.push_str("tags:\n");
        let ntags = r.range(1, 4);
        let mut tags: Vec<&str> = Vec::new();
        for _ in 0..ntags {
            let t = TAGS[r.skewed(TAGS.len())];
            if !tags.contains(&t) {
                tags.push(t);
            }
        }
        for t in &tags {
            s.push_str(&format!("  - {t}\n"));
        }
        let day = 1 + i % 28;
        let month = 1 + (i / 28) % 12;
        s.push_str(&format!("created: 2024-{month:02}-{day:02}\n"));
        s.push_str(&format!("updated: 2025-{month:02}-{day:02}\n"));
        // Typed fields for `query_notes`: a paper's year, authors and read status.
        s.push_str(&format!("year: {}\n", 1990 + i % 35));
        s.push_str(&format!(
            "authors: [{}, {}]\n",
            AUTHORS[i % AUTHORS.len()],
            AUTHORS[(i / AUTHORS.len() + 3) % AUTHORS.len()]
        ));
        s.push_str(&format!("status: {}\n", STATUS[(i / 7) % STATUS.len()]));
        if r.unit() < 0.2 {
            s.push_str("description: ");
            s.push_str(&self.sentence(&mut r, 6, 12));
            s.push('\n');
        }
        s.push_str("---\n");
        s.push_str(&format!("# {title}\n\n"));

        // The planted words, each placed once or twice somewhere in the body.
        let mut plants: Vec<&'static str> = Vec::new();
        if p.rare {
            plants.push(RARE);
        }
        for (on, w) in [
            (p.common, COMMON.word),
            (p.common2, COMMON2.word),
            (p.common3, COMMON3.word),
        ] {
            if on {
                plants.push(w);
                if r.unit() < 0.3 {
                    plants.push(w);
                }
            }
        }
        // Language mix: mostly English with a Chinese paragraph, some mostly Chinese, some English only.
        let mix = r.unit();
        let (en_pars, zh_pars) = if mix < 0.2 {
            (1, 3)
        } else if mix < 0.9 {
            (4, 1)
        } else {
            (4, 0)
        };
        let mut blocks: Vec<String> = Vec::new();
        for _ in 0..en_pars {
            let k = r.range(3, 7);
            let sentences: Vec<String> = (0..k).map(|_| self.sentence(&mut r, 8, 18)).collect();
            blocks.push(sentences.join(" "));
        }
        for _ in 0..zh_pars {
            let k = r.range(2, 4);
            let sentences: Vec<String> = (0..k).map(|_| zh_sentence(&mut r)).collect();
            blocks.push(sentences.join(""));
        }
        if p.cjk {
            let at = r.below(blocks.len());
            blocks[at].push_str(&format!("{}{}{}。", pick(&mut r, ZH), CJK.word, pick(&mut r, ZH)));
        }
        // Plant each word as a word inside a random paragraph (English words in English text, but a
        // Chinese-only paragraph also gets them, as real mixed notes do).
        for w in plants {
            let at = r.below(blocks.len());
            let b = &mut blocks[at];
            let cut = word_boundary(b, r.below(b.len().max(1)));
            b.insert_str(cut, &format!("{w} "));
        }
        // Links: a few to other notes, skewed toward early (hub) notes; about one in a hundred broken.
        let nlinks = r.range(2, 6);
        let mut links: Vec<String> = Vec::new();
        for _ in 0..nlinks {
            let j = if r.unit() < 0.3 {
                r.skewed(self.n)
            } else {
                r.below(self.n)
            };
            if r.unit() < 0.01 {
                links.push(format!("[[missing-note-{i}-{j}]]"));
            } else if r.unit() < 0.3 {
                links.push(format!("[[{}|{}]]", self.stem(j), self.title(j)));
            } else {
                links.push(format!("[[{}]]", self.stem(j)));
            }
        }
        let mut out = Vec::new();
        for (k, b) in blocks.into_iter().enumerate() {
            if k == 1 {
                out.push("## Notes".to_owned());
            }
            out.push(b);
            if k == 0 && !links.is_empty() {
                let l = links.remove(0);
                out.push(format!(
                    "- see {l}\n- #{} {}",
                    TAGS[r.below(TAGS.len())],
                    self.sentence(&mut r, 3, 7)
                ));
            }
        }
        out.push(format!("Related: {}", links.join(", ")));
        s.push_str(&out.join("\n\n"));
        s.push('\n');
        s
    }

    fn sentence(&self, r: &mut Rng, lo: usize, hi: usize) -> String {
        let k = r.range(lo, hi);
        let words: Vec<&str> = (0..k).map(|_| EN[r.skewed(EN.len())]).collect();
        let mut s = capitalize(words[0]);
        for w in &words[1..] {
            s.push(' ');
            s.push_str(w);
        }
        s.push('.');
        s
    }

    /// Writes the vault into `dir` (which must not exist) and returns its manifest.
    pub fn write(&self, dir: &Path) -> std::io::Result<Manifest> {
        let started = std::time::Instant::now();
        std::fs::create_dir_all(dir)?;
        let mut bytes = 0u64;
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for i in 0..self.n {
            if i % PER_FOLDER == 0 {
                std::fs::create_dir_all(dir.join(format!("topic-{:03}", i / PER_FOLDER)))?;
            }
            let text = self.note(i);
            bytes += text.len() as u64;
            let mut f = std::fs::File::create(dir.join(self.path(i)))?;
            f.write_all(text.as_bytes())?;
            for q in matching(&self.presence(i)) {
                *counts.entry(q.to_owned()).or_default() += 1;
            }
        }
        for q in content_queries().iter().chain(knowledge_queries().iter()) {
            counts.entry(q.key.to_owned()).or_default();
        }
        Ok(Manifest {
            notes: self.n,
            seed: self.seed,
            bytes,
            matching_notes: counts,
            generate_secs: started.elapsed().as_secs_f64(),
        })
    }
}

/// The query keys a note with this presence matches.
pub fn matching(p: &Presence) -> Vec<&'static str> {
    let mut v = Vec::new();
    if p.rare {
        v.push("rare-1");
    }
    if p.common {
        v.push("common-1");
    }
    if p.rare && p.common && p.common2 {
        v.push("rare-3");
    }
    if p.common && p.common2 && p.common3 {
        v.push("common-3");
    }
    if p.cjk {
        v.push("cjk");
    }
    if p.title_word {
        v.push("title");
        v.push("alias-cjk");
    }
    v
}

fn pick(r: &mut Rng, list: &[&'static str]) -> &'static str {
    list[r.below(list.len())]
}

fn zh_sentence(r: &mut Rng) -> String {
    let k = r.range(6, 14);
    let mut s: String = (0..k).map(|_| ZH[r.skewed(ZH.len())]).collect();
    s.push(if r.unit() < 0.8 { '。' } else { '，' });
    s
}

fn capitalize(w: &str) -> String {
    let mut c = w.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// The nearest char boundary at or before `at` that starts a word (after a space), or 0.
fn word_boundary(s: &str, at: usize) -> usize {
    let mut at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    match s[..at].rfind(' ') {
        Some(sp) => sp + 1,
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planted_words() -> Vec<String> {
        vec![
            RARE.to_owned(),
            COMMON.word.to_owned(),
            COMMON2.word.to_owned(),
            COMMON3.word.to_owned(),
            CJK.word.to_owned(),
            TITLE_WORD.word.to_lowercase(),
            TITLE_ALIAS.to_owned(),
        ]
    }

    #[test]
    fn vocabularies_never_spell_a_planted_word() {
        // Any two adjacent vocabulary words (with or without a space) must not contain a planted word.
        for w in planted_words() {
            for a in EN.iter().chain(ZH.iter()) {
                for b in EN.iter().chain(ZH.iter()) {
                    let joined = format!("{a}{b}").to_lowercase();
                    let spaced = format!("{a} {b}").to_lowercase();
                    assert!(!joined.contains(&w) && !spaced.contains(&w), "{a}+{b} spells {w}");
                }
            }
        }
    }

    #[test]
    fn generation_is_deterministic() {
        let a = Generator::new(500, 7);
        let b = Generator::new(500, 7);
        for i in [0, 1, 250, 499] {
            assert_eq!(a.note(i), b.note(i));
            assert_eq!(a.path(i), b.path(i));
        }
        assert_ne!(a.note(3), Generator::new(500, 8).note(3));
    }

    #[test]
    fn planted_words_occur_exactly_where_the_manifest_says() {
        let g = Generator::new(1000, 42);
        let mut rare = 0;
        for i in 0..g.n {
            let text = g.note(i).to_lowercase();
            let p = g.presence(i);
            assert_eq!(text.contains(RARE), p.rare, "note {i}");
            assert_eq!(text.contains(COMMON.word), p.common, "note {i}");
            assert_eq!(text.contains(COMMON2.word), p.common2, "note {i}");
            assert_eq!(text.contains(COMMON3.word), p.common3, "note {i}");
            assert_eq!(text.contains(CJK.word), p.cjk, "note {i}");
            assert_eq!(text.contains(TITLE_ALIAS), p.title_word, "note {i}");
            rare += usize::from(p.rare);
        }
        assert_eq!(rare, RARE_NOTES);
    }

    #[test]
    fn paths_are_unique_and_links_name_existing_stems() {
        let g = Generator::new(300, 1);
        let stems: std::collections::BTreeSet<String> = (0..g.n).map(|i| g.stem(i)).collect();
        assert_eq!(stems.len(), g.n);
        let text = g.note(5);
        assert!(text.starts_with("---\ntitle: "));
        assert!(text.contains("[["));
    }
}
